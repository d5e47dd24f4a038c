"""Errors of the rollout layer: programmer/config faults and broken invariants, never warnings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# Options a user has when a chat template rewrites earlier turns (documented in docs/agents.md).
REWRITE_OPTIONS = (
    "Options: (1) train one sample per assistant turn: `history=\"auto\"` (the default) or "
    "`history=\"per_turn\"` (config: rollout.history); (2) pass a history-preserving template via "
    "`chat_template=` (for Qwen3, a variant that keeps every assistant message's <think> block verbatim); "
    "(3) switch the rewriting feature off with `chat_template_kwargs=` where the template offers a flag. "
    "See docs/agents.md, 'History-rewriting templates'."
)


class AgentsError(Exception):
    """Base class of the errors raised by `agents`."""


class TemplateError(AgentsError):
    """The chat template does not render a conversation as an append-only token stream.

    Raised when rendering the next turn does not extend the previous rendering (the template
    rewrote history, e.g. Qwen3 dropping earlier `<think>` blocks), or when it renders a sampled
    assistant turn differently from what the policy produced.
    """


class TrajectoryError(AgentsError):
    """A token-ledger invariant is broken (sampled ids, mask, log-probs or prefix property)."""


class PromptTooLongError(AgentsError, ValueError):
    """An initial prompt is longer than `RolloutLimits.max_prompt_tokens` and truncation is "error"."""


def text_diff(expected: str, actual: str, *, context: int = 40) -> str:
    """Describe where two strings first differ, with a window of context on each side.

    Args:
        expected: The text that should have appeared.
        actual: The text that did appear.
        context: Characters shown on each side of the first difference.

    Returns:
        A short human-readable report: the offset and both windows, `repr`-quoted.
    """
    pos = next(
        (i for i, (a, b) in enumerate(zip(expected, actual, strict=False)) if a != b),
        min(len(expected), len(actual)),
    )
    lo = max(0, pos - context)
    return (
        f"first difference at character {pos}:\n"
        f"  expected: ...{expected[lo : pos + context]!r}\n"
        f"  actual:   ...{actual[lo : pos + context]!r}"
    )


def ids_diff(
    expected: Sequence[int], actual: Sequence[int], tokenizer: Any = None, *, context: int = 8
) -> str:
    """Describe where two id sequences first differ, decoding a window when a tokenizer is given.

    Args:
        expected: The ids that should have appeared.
        actual: The ids that did appear.
        tokenizer: Optional tokenizer with `decode`; without one only ids are shown.
        context: Tokens shown on each side of the first difference.

    Returns:
        A report naming the first differing position with both windows (ids and decoded text).
    """
    pos = next(
        (i for i, (a, b) in enumerate(zip(expected, actual, strict=False)) if a != b),
        min(len(expected), len(actual)),
    )
    lo = max(0, pos - context)
    exp_win, act_win = list(expected[lo : pos + context]), list(actual[lo : pos + context])
    lines = [
        f"first difference at token {pos} (lengths {len(expected)} vs {len(actual)}):",
        f"  expected ids[{lo}:]: {exp_win}",
        f"  actual   ids[{lo}:]: {act_win}",
    ]
    if tokenizer is not None:
        lines.append(f"  expected text: {tokenizer.decode(exp_win)!r}")
        lines.append(f"  actual   text: {tokenizer.decode(act_win)!r}")
    return "\n".join(lines)

"""Budgets of one episode (`RolloutLimits`) and the cut of its initial prompt (`limit_prompt`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agents.errors import PromptTooLongError


@dataclass(frozen=True, kw_only=True)
class RolloutLimits:
    """Budgets of one episode."""

    max_turns: int = 8
    """Assistant turns at most; an episode still calling tools after this ends with "max_turns"."""
    max_response_tokens: int = 2048
    """Tokens after the prompt at most (sampled + injected); each turn may sample what is left.
    Reaching it ends the episode with "length"."""
    max_tool_output_tokens: int | None = 512
    """Tokens of each injected message's content at most (longer output is cut, with a marker)."""
    max_prompt_tokens: int | None = None
    """Tokens of the rendered initial prompt at most (verl's `data.max_prompt_length`); None = no limit.
    Only the first prompt is limited: later turns grow the context by at most `max_response_tokens`,
    so a turn's context is at most max_prompt_tokens + max_response_tokens."""
    prompt_truncation: Literal["left", "error"] = "left"
    """A longer prompt: "left" keeps its last `max_prompt_tokens` ids (verl's `truncation="left"`:
    the system prompt's head is lost, the question and the generation prompt are kept); "error"
    raises `PromptTooLongError`."""

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError(f"RolloutLimits.max_turns must be >= 1, got {self.max_turns}")
        if self.max_response_tokens < 1:
            raise ValueError(
                f"RolloutLimits.max_response_tokens must be >= 1, got {self.max_response_tokens}"
            )
        if self.max_tool_output_tokens is not None and self.max_tool_output_tokens < 1:
            raise ValueError(
                "RolloutLimits.max_tool_output_tokens must be >= 1 or None (unlimited), "
                f"got {self.max_tool_output_tokens}"
            )
        if self.max_prompt_tokens is not None and self.max_prompt_tokens < 1:
            raise ValueError(
                "RolloutLimits.max_prompt_tokens must be >= 1 or None (unlimited), "
                f"got {self.max_prompt_tokens}"
            )
        if self.prompt_truncation not in ("left", "error"):
            raise ValueError(
                f"RolloutLimits.prompt_truncation must be 'left' or 'error', got {self.prompt_truncation!r}"
            )


def limit_prompt(ids: list[int], limits: RolloutLimits, task_id: str = "") -> tuple[list[int], int]:
    """The initial prompt ids the policy is fed, after `limits.max_prompt_tokens`.

    With N = max_prompt_tokens and a prompt of P > N ids, "left" keeps `ids[P - N:]` (exactly N ids);
    "error" raises. A prompt of at most N ids (or N = None) is returned unchanged.

    Args:
        ids: The rendered initial prompt (system + user + generation prompt).
        limits: The episode's budgets.
        task_id: Named in the error message.

    Returns:
        (ids fed to the policy, number of ids cut from the left).

    Raises:
        PromptTooLongError: P > N with prompt_truncation="error".
    """
    limit = limits.max_prompt_tokens
    if limit is None or len(ids) <= limit:
        return ids, 0
    if limits.prompt_truncation == "error":
        raise PromptTooLongError(
            f"task {task_id!r}: the rendered prompt has {len(ids)} tokens, more than max_prompt_tokens="
            f"{limit}. Raise rollout.max_prompt_tokens (RolloutLimits.max_prompt_tokens), shorten the "
            f"prompt, or set rollout.prompt_truncation=left to keep its last {limit} tokens"
        )
    return ids[len(ids) - limit :], len(ids) - limit

"""Demonstration → token trajectory, through the rollouts' own renderer and token ledger.

A demonstration is replayed exactly as `agents.Episode` plays an episode: the prompt messages are
rendered once (`agents.ChatRenderer`), each assistant turn is encoded as the text a policy would
sample plus the end-of-turn (eos) id and recorded with `TokenLedger.add_sampled`, and the messages
that follow it (tool results, user turns) are rendered as a template delta and recorded with
`add_injected`. So the loss mask is 1 on exactly the tokens a policy would have sampled (assistant
text and its eos) and 0 on the prompt, tool output and template glue, the same ids and masks RL
rollouts of the same conversation produce. The ledger's invariants are checked at the end.

Budgets mirror `agents.RolloutLimits`: tool output cut to `max_tool_output_tokens` (same marker),
the initial prompt limited by `max_prompt_tokens`, at most `max_turns` assistant turns, and the
response cut at `max_response_tokens` (a cut assistant turn ends without eos, as a "length" turn).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agents.episode import RolloutLimits, limit_prompt
from agents.ledger import TokenLedger
from agents.policy import Completion
from agents.render import ChatRenderer, encode, truncate_content
from agents.trajectory import Trajectory
from training.sft.data import Demo


def tool_call_block(call: dict[str, Any]) -> str:
    """One OpenAI tool call as the Hermes text a policy writes: `<tool_call>{name, arguments}</tool_call>`."""
    fn = call.get("function", call)
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError as err:
            raise ValueError(f"tool call {fn.get('name')!r}: arguments are not JSON ({err})") from None
    return "<tool_call>" + json.dumps({"name": fn["name"], "arguments": args}) + "</tool_call>"


def assistant_text(message: dict[str, Any]) -> str:
    """The text a policy samples for an assistant message: its content, then its tool calls (Hermes)."""
    content = str(message.get("content") or "")
    calls = [tool_call_block(c) for c in message.get("tool_calls") or []]
    return content + ("\n" if content and calls else "") + "".join(calls)


def _turns(messages: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[tuple[dict, list[dict]]]]:
    """(prompt messages, [(assistant message, the non-assistant messages after it)])."""
    first = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
    turns: list[tuple[dict, list[dict]]] = []
    for m in messages[first:]:
        if m["role"] == "assistant":
            turns.append((m, []))
        else:
            turns[-1][1].append(
                {k: v for k, v in m.items() if k in ("role", "content", "name", "tool_call_id")}
            )
    return list(messages[:first]), turns


def encode_demo(
    demo: Demo,
    tokenizer: Any,
    limits: RolloutLimits | None = None,
    *,
    render_kwargs: dict[str, Any] | None = None,
) -> Trajectory:
    """The token trajectory of `demo` (see the module docstring).

    Args:
        demo: The demonstration.
        tokenizer: The model's tokenizer with its chat template; its eos id ends every turn.
        limits: Episode budgets (the RL run's, so SFT sees what RL will); None = no limits.
        render_kwargs: `chat_template` / `chat_template_kwargs` for `agents.ChatRenderer`.

    Returns:
        A `Trajectory` with reward `demo.reward` (0 when unknown), loss mask 1 on assistant tokens.

    Raises:
        agents.TemplateError: The template does not render an assistant turn verbatim or rewrites
            history (the same error a rollout would raise).
    """
    limits = limits or RolloutLimits(max_turns=10**6, max_response_tokens=10**9, max_tool_output_tokens=None)
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("the tokenizer has no eos token; set tokenizer.eos_token to its end-of-turn token")
    prompt, turns = _turns(demo.messages)
    renderer = ChatRenderer(tokenizer, prompt, tools=demo.tools or None, **(render_kwargs or {}))
    ids, _ = limit_prompt(list(renderer.prompt_ids), limits, demo.task_id)
    traj = Trajectory(prompt_ids=ids, reward=float(demo.reward or 0.0), task_id=demo.task_id)
    ledger = TokenLedger(traj)
    for index, (message, after) in enumerate(turns[: limits.max_turns]):
        cut = bool(message.get("truncated")) and index == len(turns) - 1
        sampled = encode(tokenizer, assistant_text(message)) + ([] if cut else [eos])
        left = limits.max_response_tokens - len(traj.response_ids)
        stopped = not cut and len(sampled) <= left
        sampled = sampled[:left]
        ledger.add_sampled(
            ledger.context(),
            Completion(
                ids=sampled, logprobs=[0.0] * len(sampled), finish_reason="stop" if stopped else "length"
            ),
        )
        traj.num_turns += 1
        if not stopped or index == len(turns) - 1 or index + 1 == limits.max_turns:
            traj.finish_reason = "stop" if stopped else "length"
            break
        renderer.add_assistant(sampled, stopped=True)
        injected = [truncate_content(tokenizer, m, limits.max_tool_output_tokens)[0] for m in after]
        delta, segments = renderer.add_messages(injected)
        ledger.add_injected(delta, segments)
        if len(traj.response_ids) >= limits.max_response_tokens:
            ledger.truncate(limits.max_response_tokens)
            traj.finish_reason = "length"
            break
    traj.messages = list(demo.messages)
    traj.metrics = {
        "tool_calls": float(
            sum(m["role"] == "tool" for _, after in turns[: traj.num_turns - 1] for m in after)
        ),
        "sampled_tokens": float(sum(traj.loss_mask)),
        "response_tokens": float(len(traj.response_ids)),
    }
    ledger.check(tokenizer)
    return traj


def encode_demos(
    demos: Sequence[Demo],
    tokenizer: Any,
    limits: RolloutLimits | None = None,
    *,
    render_kwargs: dict[str, Any] | None = None,
) -> list[Trajectory]:
    """`encode_demo` of each demonstration, in order."""
    return [encode_demo(d, tokenizer, limits, render_kwargs=render_kwargs) for d in demos]

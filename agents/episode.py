"""One episode's state machine: reset, record a sampled turn, step the env, inject its messages.

The rollout loops (`agents.rollout`, `agents.rollout_batch`) drive many `Episode`s; each one owns
its env, its `ChatRenderer` and its `TokenLedger`. Failure paths (CONTRIBUTING.md):
the model's mistakes are the env's business (observations, rewards); an exception from the env is a
world failure recorded as `Trajectory.failed` with finish_reason "error"; template and ledger faults
raise at once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

from agents.errors import PromptTooLongError
from agents.ledger import TokenLedger
from agents.policy import Completion
from agents.render import ChatRenderer, decode, truncate_content
from agents.trajectory import Trajectory


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


@dataclass
class StepOutcome:
    """What one `env.step` call produced (or the exception it raised), and how long it took."""

    result: Any
    error: BaseException | None
    seconds: float


class Episode:
    """One episode of an env driven turn by turn (see the module docstring).

    Args:
        env: A text env (`reset(seed, options) -> (messages, info)`, `step(text) -> 5-tuple`).
        tokenizer: The policy's tokenizer (chat template included).
        limits: The episode's budgets.
        group_id: GRPO group (task index) of the episode.
        render_kwargs: `chat_template` / `chat_template_kwargs` for `ChatRenderer`.
    """

    def __init__(
        self,
        env: Any,
        tokenizer: Any,
        limits: RolloutLimits,
        *,
        group_id: int = 0,
        render_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.env, self.tokenizer, self.limits = env, tokenizer, limits
        self.render_kwargs = render_kwargs or {}
        self.traj = Trajectory(prompt_ids=[], group_id=group_id)
        self.ledger = TokenLedger(self.traj)
        self.renderer: ChatRenderer | None = None
        self.live = False
        self._extra_messages: list[dict[str, Any]] = []
        self.counts = {
            "tool_calls": 0.0,
            "tool_errors": 0.0,
            "generation_s": 0.0,
            "tool_s": 0.0,
            "truncated_tool_outputs": 0.0,
            "prompt_truncated": 0.0,
            "prompt_tokens_cut": 0.0,
        }

    def reset_env(self, seed: int | None, options: dict[str, Any] | None) -> StepOutcome:
        """Call `env.reset`; safe to run in a worker thread (touches only this env)."""
        task = (options or {}).get("task")
        self.traj.task_id = getattr(task, "id", "") or ""
        start = time.perf_counter()
        try:
            return StepOutcome(self.env.reset(seed=seed, options=options), None, time.perf_counter() - start)
        except Exception as err:  # world failure: recorded by begin()
            return StepOutcome(None, err, time.perf_counter() - start)

    def begin(self, outcome: StepOutcome) -> None:
        """Render the initial prompt from the reset outcome; a reset exception marks the episode failed.

        The prompt is limited by `limits.max_prompt_tokens` (`limit_prompt`) before the first generate:
        `Trajectory.prompt_ids` holds exactly the ids fed to the policy, so the trainer's log-prob
        pass conditions on what was sampled from. The renderer keeps the full text (template deltas
        are computed on text, so later turns append to the cut prompt unchanged).

        Raises:
            PromptTooLongError: The prompt is too long and `limits.prompt_truncation` is "error".
        """
        if outcome.error is not None:
            self._fail(outcome.error)
            return
        messages, info = outcome.result
        self.renderer = ChatRenderer(
            self.tokenizer, messages, tools=info.get("tools") or None, **self.render_kwargs
        )
        ids, cut = limit_prompt(list(self.renderer.prompt_ids), self.limits, self.traj.task_id)
        self.traj.prompt_ids = ids
        self.counts["prompt_truncated"] = float(cut > 0)
        self.counts["prompt_tokens_cut"] = float(cut)
        self.live = True

    def budget_left(self) -> int:
        """Response tokens still allowed."""
        return self.limits.max_response_tokens - len(self.traj.response_ids)

    def take_turn(self, prompt: list[int], completion: Completion, max_tokens: int) -> str | None:
        """Record a sampled turn; return the action text for the env, or None when the episode ended.

        The completion is first cut to `min(max_tokens, budget_left())` ids: the batch shares one
        `max_tokens`, each episode keeps only what its own budget allows (a prefix of a sample is
        still exactly sampled).
        """
        completion = _clip(completion, min(max_tokens, self.budget_left()))
        self.ledger.add_sampled(prompt, completion)
        self.traj.num_turns += 1
        if completion.finish_reason == "length":
            self._extra_messages.append(
                {"role": "assistant", "content": decode(self.tokenizer, completion.ids)}
            )
            self.finish("length")
            return None
        return self.renderer.add_assistant(completion.ids, stopped=True)

    def step_env(self, action: str) -> StepOutcome:
        """Call `env.step(action)`; safe to run in a worker thread (touches only this env)."""
        start = time.perf_counter()
        try:
            return StepOutcome(self.env.step(action), None, time.perf_counter() - start)
        except Exception as err:  # world failure: recorded by absorb()
            return StepOutcome(None, err, time.perf_counter() - start)

    def absorb(self, outcome: StepOutcome) -> None:
        """Apply an env step's outcome: reward, counters, ending, or the injected messages."""
        self.counts["tool_s"] += outcome.seconds
        if outcome.error is not None:
            self._fail(outcome.error)
            return
        messages, reward, terminated, truncated, info = outcome.result
        self.traj.reward += float(reward)
        self.counts["tool_calls"] += float(info.get("tool_calls", 0))
        self.counts["tool_errors"] += float(info.get("tool_errors", 0))
        if "grade" in info:
            self.traj.grade_status = str(info["grade"].get("status", ""))
        if terminated or truncated or self.traj.num_turns >= self.limits.max_turns:
            self._extra_messages += list(messages)
            self.finish("stop" if terminated else "max_turns")
            return
        self._inject(messages)

    def _inject(self, messages: list[dict[str, Any]]) -> None:
        capped = []
        for message in messages:
            message, cut = truncate_content(self.tokenizer, message, self.limits.max_tool_output_tokens)
            self.counts["truncated_tool_outputs"] += float(cut)
            capped.append(message)
        ids, segments = self.renderer.add_messages(capped)
        self.ledger.add_injected(ids, segments)
        if self.budget_left() <= 0:  # no room left to sample: cut injected ids, never sampled ones
            self.ledger.truncate(self.limits.max_response_tokens)
            self.finish("length")

    def _fail(self, err: BaseException) -> None:
        self.traj.failed = f"{type(err).__name__}: {err}"
        self.finish("error")

    def finish(self, reason: str) -> None:
        """End the episode with `reason` (stop, length, max_turns, error)."""
        self.traj.finish_reason = reason
        self.live = False

    def close(self) -> Trajectory:
        """Close the env, check the ledger, fill transcript and metrics; returns the trajectory."""
        t = self.traj
        t.metrics = {
            **self.counts,
            "response_tokens": float(len(t.response_ids)),
            "sampled_tokens": float(sum(t.loss_mask)),
            "num_turns": float(t.num_turns),
        }
        try:
            self.env.close()
        except Exception:  # a failing close must not lose a finished episode
            t.metrics["close_failed"] = 1.0
        t.messages = (self.renderer.messages if self.renderer else []) + self._extra_messages
        self.ledger.check(self.tokenizer)
        return t


def _clip(completion: Completion, limit: int) -> Completion:
    """The first `limit` ids of a completion (finish "length" when cut)."""
    if len(completion.ids) != len(completion.logprobs) or not completion.ids:
        raise ValueError(
            f"policy returned a completion with {len(completion.ids)} ids and "
            f"{len(completion.logprobs)} log-probs; need equal, non-zero lengths"
        )
    if len(completion.ids) <= limit:
        return completion
    return Completion(
        ids=list(completion.ids[:limit]), logprobs=list(completion.logprobs[:limit]), finish_reason="length"
    )

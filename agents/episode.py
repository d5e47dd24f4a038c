"""One episode's state machine: reset, record a sampled turn, step the env, inject its messages.

The rollout loops (`agents.rollout`, `agents.rollout_batch`) drive many `Episode`s; each one owns
its env, its `ChatRenderer` and its `TokenLedger`. Failure paths (CONTRIBUTING.md):
the model's mistakes are the env's business (observations, rewards); an exception from the env is a
world failure recorded as `Trajectory.failed` with finish_reason "error"; template and ledger faults
raise at once.

History modes (`history=`): "append" keeps one growing token sequence and raises `TemplateError`
when the template rewrites history; "per_turn" prompts every turn with the template's rendering of
the history and trains one sample per turn (`agents.turns`); "auto" (default) is append-only until
the template is seen rewriting history (rendered, never assumed), then per-turn for the episode.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agents.errors import TemplateError
from agents.ledger import TokenLedger
from agents.limits import RolloutLimits, limit_prompt
from agents.policy import Completion
from agents.render import ChatRenderer, Message, decode, truncate_content
from agents.trajectory import Trajectory
from agents.turns import build_samples
from envs.toolformats import history_format

HistoryMode = Literal["auto", "append", "per_turn"]
HISTORY_MODES: tuple[str, ...] = ("auto", "append", "per_turn")

__all__ = ["HISTORY_MODES", "Episode", "HistoryMode", "RolloutLimits", "StepOutcome", "limit_prompt"]


@dataclass
class StepOutcome:
    """What one `env.step` call produced (or the exception it raised), and how long it took."""

    result: Any
    error: BaseException | None
    seconds: float


class Episode:
    """One episode of an env driven turn by turn (see the module docstring).

    Args:
        env: A text env (`reset(seed, options) -> (messages, info)`, `step(text) -> 5-tuple`); its
            `parser` (when a `envs.toolformats.ToolFormat`) says how turns go back into the history.
        tokenizer: The policy's tokenizer (chat template included).
        limits: The episode's budgets.
        group_id: GRPO group (task index) of the episode.
        render_kwargs: `chat_template` / `chat_template_kwargs` for `ChatRenderer`.
        history: "auto", "append" or "per_turn" (module docstring).
        stop_ids: Stop token ids; one that is a special token (`<|im_end|>`, `</s>`) ending a turn is
            never part of the assistant message's content (the template re-creates it).
    """

    def __init__(
        self,
        env: Any,
        tokenizer: Any,
        limits: RolloutLimits,
        *,
        group_id: int = 0,
        render_kwargs: dict[str, Any] | None = None,
        history: HistoryMode = "auto",
        stop_ids: Sequence[int] = (),
    ) -> None:
        if history not in HISTORY_MODES:
            raise ValueError(f"history must be one of {HISTORY_MODES}, got {history!r}")
        self.env, self.tokenizer, self.limits = env, tokenizer, limits
        self.render_kwargs = render_kwargs or {}
        self.history_mode, self.per_turn = history, history == "per_turn"
        special = set(getattr(tokenizer, "all_special_ids", ()) or ())
        self.stop_ids = frozenset(int(i) for i in stop_ids if int(i) in special)
        self.parser = getattr(getattr(env, "unwrapped", env), "parser", None)
        self.format = history_format(self.parser)
        self.traj = Trajectory(prompt_ids=[], group_id=group_id)
        self.ledger = TokenLedger(self.traj)
        self.renderer: ChatRenderer | None = None
        self.messages: list[Message] = []
        """The chat history in per-turn mode (the renderer holds it while append-only)."""
        self._context: list[int] = []
        self._assistant: Message = {}
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
        are computed on text, so later turns append to the cut prompt unchanged). An env parser
        with `bind` (`parser="auto"`) is bound to the chat template in use.

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
        if callable(getattr(self.parser, "bind", None)):
            own = getattr(self.tokenizer, "chat_template", None)
            self.format = self.parser.bind(self.render_kwargs.get("chat_template") or own)
        ids, cut = limit_prompt(list(self.renderer.prompt_ids), self.limits, self.traj.task_id)
        self.traj.prompt_ids, self._context = ids, ids
        self.messages = list(self.renderer.messages)
        self.counts["prompt_truncated"] = float(cut > 0)
        self.counts["prompt_tokens_cut"] = float(cut)
        self.live = True

    def context(self) -> list[int]:
        """The ids the policy is prompted with next."""
        return self._context if self.per_turn else self.ledger.context()

    def _used(self) -> int:
        """Tokens the episode has grown past its first prompt (the response budget spent)."""
        if not self.per_turn:
            return len(self.traj.response_ids)
        return len(self._context) - len(self.traj.prompt_ids)

    def budget_left(self) -> int:
        """Response tokens still allowed."""
        return self.limits.max_response_tokens - self._used()

    def take_turn(self, prompt: list[int], completion: Completion, max_tokens: int) -> str | None:
        """Record a sampled turn; return the action text for the env, or None when the episode ended.

        The completion is first cut to `min(max_tokens, budget_left())` ids: the batch shares one
        `max_tokens`, each episode keeps only what its own budget allows (a prefix of a sample is
        still exactly sampled).
        """
        completion = _clip(completion, min(max_tokens, self.budget_left()))
        if self.per_turn:
            self.ledger.record(prompt, completion)
            self._context = list(prompt) + list(completion.ids)
        else:
            self.ledger.add_sampled(prompt, completion)
        self.traj.num_turns += 1
        if completion.finish_reason == "length":
            self._extra_messages.append(
                {"role": "assistant", "content": decode(self.tokenizer, completion.ids)}
            )
            self.finish("length")
            return None
        return self._add_assistant(completion.ids)

    def _add_assistant(self, ids: list[int]) -> str:
        """Add the sampled turn to the history; append-only when possible (see module docstring)."""
        turn = self.traj.num_turns - 1
        build = lambda text: self.format.assistant_message(text, turn)  # noqa: E731
        if not self.per_turn:
            try:
                content = self.renderer.add_assistant(ids, stopped=True, build=build, stop_ids=self.stop_ids)
                self._assistant = self.renderer.messages[-1]
                return content
            except TemplateError:
                if self.history_mode == "append":
                    raise
                self._switch()
        cut = len(ids) - 1 if ids and ids[-1] in self.stop_ids else len(ids)
        content = decode(self.tokenizer, ids[:cut])
        self._assistant = build(content)
        self.messages.append(self._assistant)
        return content

    def _switch(self) -> None:
        """The template rewrote history ("auto" mode): per-turn from here on, from the history so far."""
        self.per_turn = True
        self.messages = list(self.renderer.messages)
        self._context = self.ledger.context()

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
        capped = self.format.tool_messages(capped, self._assistant, self.traj.num_turns - 1)
        if not self.per_turn:
            try:
                ids, segments = self.renderer.add_messages(capped)
            except TemplateError:
                if self.history_mode == "append":
                    raise
                self._switch()
            else:
                self.ledger.add_injected(ids, segments)
                if self.budget_left() <= 0:  # no room left to sample: cut injected ids, never sampled ones
                    self.ledger.truncate(self.limits.max_response_tokens)
                    self.finish("length")
                return
        self.messages.extend(capped)
        cut = int(self.counts["prompt_tokens_cut"])
        self._context = self.renderer.render_ids(self.messages)[cut:]
        if self.budget_left() <= 0:
            self.finish("length")

    def _fail(self, err: BaseException) -> None:
        self.traj.failed = f"{type(err).__name__}: {err}"
        self.finish("error")

    def finish(self, reason: str) -> None:
        """End the episode with `reason` (stop, length, max_turns, error)."""
        self.traj.finish_reason = reason
        self.live = False

    def close(self) -> Trajectory:
        """Close the env, check the ledger (per sample when per-turn), fill transcript and metrics."""
        t = self.traj
        try:
            self.env.close()
        except Exception:  # a failing close must not lose a finished episode
            self.counts["close_failed"] = 1.0
        history = self.messages if self.per_turn else (self.renderer.messages if self.renderer else [])
        t.messages = list(history) + self._extra_messages
        if self.per_turn and self.ledger.completions:
            self._close_per_turn()
        else:
            self.ledger.check(self.tokenizer)
        t.metrics = {
            **self.counts,
            "response_tokens": float(len(t.response_ids)),
            "sampled_tokens": float(t.sampled_tokens),
            "num_turns": float(t.num_turns),
            "per_turn": float(t.per_turn),
        }
        return t

    def _close_per_turn(self) -> None:
        """Build and check the per-turn samples; the episode's token fields become its last sample."""
        t = self.traj
        ledger = self.ledger
        samples = build_samples(t, ledger.turn_prompts, ledger.completions, tokenizer=self.tokenizer)
        last = samples[-1]
        for name in ("prompt_ids", "response_ids", "loss_mask", "logprobs", "turn_index", "segment"):
            setattr(t, name, list(getattr(last, name)))
        t.samples = samples


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

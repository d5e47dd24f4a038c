"""The no-signal alarm: say plainly when RL steps carry no learning signal, and why.

GRPO learns only from groups whose rewards differ (a group of equal rewards has advantage 0 on
every token). Per step the alarm measures

    signal = (kept groups whose rewards are not all equal) / rollout.prompts_per_step

and, when a step keeps no group or `signal < min_share` for `patience` steps in a row, prints one
warning (console, process 0) with the likely cause measured from the step's episodes, and one
failing episode's text. Causes, from the episodes of the step:

    (almost) all rewards 1                          -> too easy (every sample solves it)
    (almost) all rewards 0, mostly finish "length"  -> truncated: raise rollout.max_new_tokens or the budget
    (almost) all rewards 0, mostly no parsed answer -> wrong format (no final answer the grader can read)
    (almost) all rewards 0, mostly tool errors      -> malformed tool calls
    (almost) all rewards 0, otherwise               -> too hard (answers given, all wrong)
    otherwise                                       -> mixed (groups are uniform: larger groups help)

"Almost" is a success rate within `RARE` (5%) of 0 or 1; the failure shares are over failed episodes.

Every step's record gets `alarm/signal_share`, `alarm/no_signal_steps` and `alarm/cause` (an index
into `CAUSES`). A run whose last step arrives without a single update ends with the verdict.
`check(run, step, collected)` is the trainer's one call.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agents.trajectory import Trajectory

RARE = 0.05
"""Success rates within RARE of 0 (or 1) count as "none" ("all") rewarded when naming the cause."""

CAUSES = ("ok", "too_easy", "truncated", "wrong_format", "tool_errors", "too_hard", "mixed")
"""Values of `alarm/cause` (its index is logged)."""

ADVICE = {
    "too_easy": "every sample is rewarded: use harder tasks (or a smaller model)",
    "truncated": "episodes run out of tokens before answering: raise rollout.max_new_tokens or "
                 "rollout.max_response_tokens (or SFT the model to answer sooner)",
    "wrong_format": "the model gives no answer the grader can read: cold-start it with `stare demos` + "
                    "`stare sft` (docs/sft.md) or check the env's answer format",
    "tool_errors": "the model's tool calls fail to parse or run: cold-start it on tool-call demonstrations "
                   "(`stare demos` + `stare sft`)",
    "too_hard": "answers are given but all wrong: use easier tasks, a stronger start (`stare sft`), or a "
                "larger group size",
    "mixed": "every group is all-solved or all-failed: raise rollout.group_size or the temperature",
}


def diagnose(trajs: Sequence[Trajectory]) -> str:
    """The likely cause (a `CAUSES` name) of a step without signal, from its episodes."""
    if not trajs:
        return "mixed"
    rate = sum(t.reward > 0 for t in trajs) / len(trajs)
    if rate >= 1 - RARE:
        return "too_easy"
    if rate > RARE:
        return "mixed"
    failed = [t for t in trajs if t.reward <= 0]
    n = len(failed)
    shares = {
        "truncated": sum(t.finish_reason in ("length", "max_turns") for t in failed) / n,
        "wrong_format": sum(t.grade_status in ("", "no_answer") for t in failed) / n,
        "tool_errors": sum(float(t.metrics.get("tool_errors", 0)) > 0 for t in failed) / n,
    }
    cause, share = max(shares.items(), key=lambda kv: kv[1])
    return cause if share >= 0.5 else "too_hard"


def signal_share(kept: Sequence[Trajectory], prompts: int) -> float:
    """Share of the step's `prompts` groups that were kept and whose rewards differ."""
    groups: dict[int, set[float]] = {}
    for t in kept:
        groups.setdefault(t.group_id, set()).add(float(t.reward))
    return sum(len(r) > 1 for r in groups.values()) / max(1, prompts)


def episode_text(traj: Trajectory, limit: int = 600) -> str:
    """A failing episode as readable text: role-tagged messages, cut to `limit` characters."""
    text = "\n".join(f"[{m.get('role')}] {m.get('content')}" for m in traj.messages)
    return text if len(text) <= limit else text[:limit] + f" ... [{len(text) - limit} more chars]"


@dataclass
class NoSignalAlarm:
    """Counts steps without signal and warns once per streak (see the module docstring)."""

    prompts: int
    total_steps: int
    patience: int = 3
    min_share: float = 0.25
    echo: Callable[[str], None] = lambda text: print(text, file=sys.stderr, flush=True)
    streak: int = 0
    updates: int = 0
    warned: bool = False
    last_cause: str = "ok"

    def observe(self, step: int, kept: Sequence[Trajectory], everything: Sequence[Trajectory],
                groups_kept: int) -> dict[str, float]:
        """Account for one step; warn at the `patience`-th weak step; returns the step's alarm metrics."""
        share = signal_share(kept, self.prompts) if groups_kept else 0.0
        self.updates += groups_kept > 0
        weak = groups_kept == 0 or share < self.min_share
        self.streak = self.streak + 1 if weak else 0
        self.warned = self.warned and weak
        cause = diagnose(everything) if weak else "ok"
        self.last_cause = cause if weak else self.last_cause
        if weak and self.streak >= self.patience and not self.warned:
            self.warned = True
            self.echo(self.message(step, share, cause, everything))
        if step == self.total_steps and self.updates == 0:
            self.echo(f"[no signal] VERDICT: this run made no update in {step} step(s); likely cause: "
                      f"{self.last_cause}: {ADVICE.get(self.last_cause, '')}")
        return {"alarm/signal_share": share, "alarm/no_signal_steps": float(self.streak),
                "alarm/cause": float(CAUSES.index(cause))}

    def message(self, step: int, share: float, cause: str, everything: Sequence[Trajectory]) -> str:
        """The warning text: what was measured, the likely cause, one failing episode."""
        failing = next((t for t in everything if t.reward <= 0), everything[0] if everything else None)
        rewards = [t.reward for t in everything]
        mean = sum(rewards) / len(rewards) if rewards else 0.0
        head = (f"[no signal] step {step}: {self.streak} step(s) in a row with "
                f"{share:.0%} of groups carrying advantage (< {self.min_share:.0%}); mean reward {mean:.2f} "
                f"over {len(rewards)} episodes. Likely cause: {cause}: {ADVICE.get(cause, '')}")
        return head + (f"\n  one failing episode:\n{episode_text(failing)}" if failing is not None else "")


_ALARMS: weakref.WeakKeyDictionary[Any, NoSignalAlarm] = weakref.WeakKeyDictionary()


def check(run: Any, step: int, collected: Any) -> dict[str, float]:
    """The trainer's call: the run's alarm observes this step (warnings on process 0 only)."""
    alarm = _ALARMS.get(run.stream)
    if alarm is None:
        quiet = not run.accelerator.is_main_process
        extra = {"echo": lambda text: None} if quiet else {}
        alarm = NoSignalAlarm(prompts=run.cfg.rollout.prompts_per_step // max(1, run.stream.world_size),
                              total_steps=run.cfg.train.steps, **extra)
        _ALARMS[run.stream] = alarm
    return alarm.observe(step, collected.kept, collected.all, collected.groups_kept)

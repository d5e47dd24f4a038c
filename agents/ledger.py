"""The verified token ledger: builds a `Trajectory` append-only and checks its invariants.

Invariants (checked by `check_trajectory` at the end of every episode):

1. every per-token list has the length of `response_ids`;
2. `loss_mask[i] == 1` exactly where `segment[i] == SAMPLED`;
3. `logprobs[i] == 0.0` wherever `loss_mask[i] == 0`;
4. each turn's prompt (the ids passed to the policy) is a prefix of the full sequence
   `prompt_ids + response_ids`, so also of every later turn's prompt;
5. right after turn t's prompt sit exactly the ids the engine returned for turn t, marked SAMPLED,
   with exactly its log-probs, and these are all the SAMPLED tokens of the trajectory.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agents.errors import TrajectoryError, ids_diff
from agents.policy import Completion
from agents.trajectory import Segment, Trajectory


class TokenLedger:
    """Accumulates one episode's ids, append-only, recording what each turn was prompted with.

    Args:
        trajectory: The trajectory to fill; its `prompt_ids` must be set.
    """

    def __init__(self, trajectory: Trajectory) -> None:
        self.traj = trajectory
        self.turn_prompts: list[list[int]] = []
        """The exact id list given to the policy at each turn."""
        self.completions: list[Completion] = []
        """The engine's completion of each turn."""

    def context(self) -> list[int]:
        """The ids the policy sees next: prompt plus everything appended so far."""
        return self.traj.prompt_ids + self.traj.response_ids

    def record(self, prompt: Sequence[int], completion: Completion) -> None:
        """Record what a turn was prompted with and sampled, without appending (per-turn mode)."""
        self.turn_prompts.append(list(prompt))
        self.completions.append(completion)

    def add_sampled(self, prompt: list[int], completion: Completion) -> None:
        """Append a sampled turn (loss mask 1) generated from `prompt`."""
        turn = len(self.completions)
        self.record(prompt, completion)
        self._extend(completion.ids, completion.logprobs, Segment.SAMPLED, turn)

    def add_injected(self, ids: Sequence[int], segments: Sequence[int]) -> None:
        """Append env-injected ids (loss mask 0, log-prob 0.0) after the latest turn."""
        if len(ids) != len(segments):
            raise TrajectoryError(
                f"injected ids ({len(ids)}) and segments ({len(segments)}) differ in length"
            )
        turn = max(len(self.completions) - 1, 0)
        t = self.traj
        t.response_ids += list(ids)
        t.loss_mask += [0] * len(ids)
        t.logprobs += [0.0] * len(ids)
        t.turn_index += [turn] * len(ids)
        t.segment += [int(s) for s in segments]

    def truncate(self, length: int) -> None:
        """Cut the response to `length` tokens; only injected tokens may be cut."""
        t = self.traj
        if any(t.loss_mask[length:]):
            raise TrajectoryError(f"truncating the response to {length} tokens would cut sampled tokens")
        for name in ("response_ids", "loss_mask", "logprobs", "turn_index", "segment"):
            setattr(t, name, getattr(t, name)[:length])

    def _extend(self, ids: Sequence[int], logprobs: Sequence[float], kind: Segment, turn: int) -> None:
        t = self.traj
        t.response_ids += list(ids)
        t.loss_mask += [1 if kind == Segment.SAMPLED else 0] * len(ids)
        t.logprobs += [float(x) for x in logprobs]
        t.turn_index += [turn] * len(ids)
        t.segment += [int(kind)] * len(ids)

    def check(self, tokenizer: Any = None) -> None:
        """Check every invariant of the trajectory against the recorded prompts and completions."""
        check_trajectory(self.traj, self.completions, self.turn_prompts, tokenizer=tokenizer)


def check_trajectory(
    traj: Trajectory,
    completions: Sequence[Completion],
    turn_prompts: Sequence[Sequence[int]],
    *,
    tokenizer: Any = None,
    first_turn: int = 0,
) -> None:
    """Verify the token-ledger invariants listed in the module docstring.

    Args:
        traj: The finished trajectory.
        completions: The engine's completion of each turn, in order.
        turn_prompts: The ids passed to the policy at each turn, in order.
        tokenizer: Optional; when given, errors include decoded text around the fault.
        first_turn: The episode turn of `completions[0]` (a per-turn sample k checks with k).

    Raises:
        TrajectoryError: With the position and a decoded diff of the first broken invariant.
    """
    n = len(traj.response_ids)
    for name in ("loss_mask", "logprobs", "turn_index", "segment"):
        if len(getattr(traj, name)) != n:
            raise TrajectoryError(
                f"Trajectory.{name} has {len(getattr(traj, name))} entries, response_ids has {n}"
            )
    if len(completions) != len(turn_prompts):
        raise TrajectoryError(f"{len(completions)} completions but {len(turn_prompts)} turn prompts")
    _check_mask_and_logprobs(traj, tokenizer)
    full = traj.prompt_ids + traj.response_ids
    p0 = len(traj.prompt_ids)
    owned = 0
    for turn, (prompt, comp) in enumerate(zip(turn_prompts, completions, strict=True), start=first_turn):
        if list(full[: len(prompt)]) != list(prompt):
            raise TrajectoryError(
                f"turn {turn}: its prompt is not a prefix of the final sequence\n"
                + ids_diff(prompt, full[: len(prompt)], tokenizer)
            )
        start, end = len(prompt), len(prompt) + len(comp.ids)
        if list(full[start:end]) != list(comp.ids):
            raise TrajectoryError(
                f"turn {turn}: sampled ids differ from the engine's at response position "
                f"{start - p0}\n" + ids_diff(comp.ids, full[start:end], tokenizer)
            )
        seg, lp = traj.segment[start - p0 : end - p0], traj.logprobs[start - p0 : end - p0]
        if any(s != Segment.SAMPLED for s in seg) or list(lp) != list(comp.logprobs):
            raise TrajectoryError(
                f"turn {turn}: positions {start - p0}..{end - p0} are not marked SAMPLED with "
                f"the engine's log-probs"
            )
        if any(t != turn for t in traj.turn_index[start - p0 : end - p0]):
            raise TrajectoryError(
                f"turn {turn}: turn_index is wrong at response positions {start - p0}..{end - p0}"
            )
        owned += len(comp.ids)
    if owned != sum(traj.loss_mask):
        raise TrajectoryError(
            f"{sum(traj.loss_mask)} tokens are marked sampled but the engine sampled {owned}: "
            f"the loss mask covers ids the policy never produced"
        )


def _check_mask_and_logprobs(traj: Trajectory, tokenizer: Any) -> None:
    """Invariants 2 and 3: the mask is exactly the SAMPLED segment; injected log-probs are 0.0."""
    for i, (m, s, lp) in enumerate(zip(traj.loss_mask, traj.segment, traj.logprobs, strict=True)):
        if m != int(s == Segment.SAMPLED):
            raise TrajectoryError(
                f"response position {i}: loss_mask={m} but segment={Segment(s).name}"
                + _where(traj, i, tokenizer)
            )
        if m == 0 and lp != 0.0:
            raise TrajectoryError(
                f"response position {i}: injected token carries log-prob {lp}, expected 0.0"
                + _where(traj, i, tokenizer)
            )


def _where(traj: Trajectory, i: int, tokenizer: Any) -> str:
    if tokenizer is None:
        return ""
    lo, hi = max(0, i - 8), i + 8
    return (
        f"\n  around it: {tokenizer.decode(traj.response_ids[lo:i])!r} >>> "
        f"{tokenizer.decode(traj.response_ids[i : i + 1])!r} <<< "
        f"{tokenizer.decode(traj.response_ids[i + 1 : hi])!r}"
    )

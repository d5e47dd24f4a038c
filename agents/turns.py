"""Per-turn samples: one training sequence per assistant turn, for templates that rewrite history.

When a chat template re-renders earlier turns differently (Qwen3 dropping an empty `<think></think>`
block once the turn is no longer the last, Mistral moving the tool list, a template that edits the
sampled text), no single growing token sequence holds every turn as it was sampled. The episode is
then trained as K samples, K = number of assistant turns:

    sample_k.prompt_ids   = P_k    the exact ids the policy was prompted with at turn k
    sample_k.response_ids = S_k    the exact ids it sampled (never re-tokenised)
    sample_k.loss_mask    = [1] * len(S_k);  logprobs = the engine's;  turn_index = [k] * len(S_k)

Each sample carries the episode's reward, group, task and grade, and satisfies the ledger invariants
of `agents.ledger` on its own (checked at the end of every episode). `split_turns` cuts an
append-only trajectory into the same samples, so both modes can be compared where both apply.
"""

from __future__ import annotations

from collections.abc import Sequence

from agents.errors import TrajectoryError
from agents.ledger import check_trajectory
from agents.policy import Completion
from agents.trajectory import Segment, Trajectory

_EPISODE_FIELDS = ("reward", "num_turns", "finish_reason", "group_id", "task_id", "grade_status", "failed")


def turn_sample(episode: Trajectory, prompt: Sequence[int], completion: Completion, turn: int) -> Trajectory:
    """Sample `turn` of `episode`: its prompt ids and exactly the ids sampled for it (mask 1)."""
    n = len(completion.ids)
    sample = Trajectory(
        prompt_ids=list(prompt),
        response_ids=list(completion.ids),
        loss_mask=[1] * n,
        logprobs=[float(x) for x in completion.logprobs],
        turn_index=[turn] * n,
        segment=[int(Segment.SAMPLED)] * n,
    )
    for name in _EPISODE_FIELDS:
        setattr(sample, name, getattr(episode, name))
    return sample


def build_samples(
    episode: Trajectory,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Completion],
    *,
    tokenizer: object = None,
) -> list[Trajectory]:
    """The checked per-turn samples of an episode from what each turn was prompted with and sampled.

    Raises:
        TrajectoryError: The prompt and completion counts differ, or a sample breaks an invariant.
    """
    if len(prompts) != len(completions):
        raise TrajectoryError(f"{len(completions)} completions but {len(prompts)} turn prompts")
    pairs = enumerate(zip(prompts, completions, strict=True))
    samples = [turn_sample(episode, p, c, k) for k, (p, c) in pairs]
    for k, sample in enumerate(samples):
        try:
            check_trajectory(sample, [completions[k]], [prompts[k]], tokenizer=tokenizer, first_turn=k)
        except TrajectoryError as err:
            raise TrajectoryError(f"per-turn sample {k}: {err}") from err
    return samples


def split_turns(traj: Trajectory) -> list[Trajectory]:
    """Cut an append-only trajectory into its per-turn samples (already per-turn: its `samples`).

    Turn k's prompt is everything before its first SAMPLED token, its response its SAMPLED run
    (invariants 4 and 5 of `agents.ledger` make this exact).
    """
    if traj.samples:
        return list(traj.samples)
    full, p0 = traj.prompt_ids + traj.response_ids, len(traj.prompt_ids)
    by_turn: dict[int, list[int]] = {}
    for i, (k, s) in enumerate(zip(traj.turn_index, traj.segment, strict=True)):
        if s == Segment.SAMPLED:
            by_turn.setdefault(k, []).append(i)
    samples = []
    for turn, pos in sorted(by_turn.items()):
        completion = Completion(ids=[traj.response_ids[i] for i in pos],
                                logprobs=[traj.logprobs[i] for i in pos], finish_reason="stop")
        samples.append(turn_sample(traj, full[: p0 + pos[0]], completion, turn))
    return samples

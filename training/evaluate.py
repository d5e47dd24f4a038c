"""Held-out evaluation: avg@k and pass@k with the reference's validation sampling (T 1.0, top-p 0.7).

For a set of N problems with k samples each and c_i correct samples on problem i:

    avg@k  = (1/N) Σ_i c_i / k                 (the paper's "Acc avg@k")
    pass@k = (1/N) Σ_i 1[c_i > 0]

plus the token-mean entropy of the sampled (loss-mask) tokens under the evaluated model, the mean
sampled response length and tool calls per episode. Sampling is seeded with `eval.seed` at every
evaluation, so successive evaluations of a run differ only through the model.

Under W data-parallel processes (`training.distributed`) each process plays a contiguous block of
whole problems, [r·N // W, (r + 1)·N // W) on rank r, k samples each, and the metrics come from
all-reduced sums, so they equal what one process computes from the same trajectories:

    S = Σ_ranks [Σ_i c_i / k,  Σ_i 1[c_i > 0],  Σ sampled tokens,  Σ tool calls,  episodes,
                 Σ_t H_t·mask_t,  Σ_t mask_t]
    avg@k = S_0 / N,  pass@k = S_1 / N,  entropy = S_5 / S_6  (global token mean, not a mean of means)

Seeds: episode j of problem i gets the env seed `eval.seed + i·k + j` whatever W is; the policy's
sampling RNG is seeded with `eval.seed + lo·k` on the process whose block starts at problem lo
(`eval.seed` in one process). Batched sampling draws every row from one RNG stream, so with W > 1
the sampled completions (not the env seeds) differ from a one-process evaluation: the same
estimator on other samples.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from agents.trajectory import Segment, Trajectory
from training import distributed
from training.batch import collate
from training.logprobs import batch_logprobs
from training.sampling import PlayFn


def score_groups(trajs: Sequence[Trajectory], k: int) -> dict[str, float]:
    """avg@k and pass@k of task-major trajectories, k per task."""
    if len(trajs) % k:
        raise ValueError(f"{len(trajs)} trajectories are not a whole number of groups of k={k}")
    correct = torch.tensor([t.is_correct for t in trajs], dtype=torch.float32).view(-1, k)   # (N, k)
    return {f"avg@{k}": float(correct.mean()), f"pass@{k}": float((correct.sum(-1) > 0).float().mean())}


def problem_accuracy(play: PlayFn, tasks: Sequence[Any], *, k: int, seed: int) -> list[float]:
    """c_i / k for every problem i, played in one process with `evaluate_set`'s seeding (W = 1).

    Two models evaluated with the same `seed` see the same problems and env seeds, so their
    per-problem scores pair up (`stare eval --baseline`).
    """
    return _correct(_play_groups(play, tasks, k, seed), k).mean(-1).tolist()


def _play_groups(play: PlayFn, tasks: Sequence[Any], k: int, seed: int) -> list[Trajectory]:
    """Play `k` episodes per task, task-major, with the torch RNG and the env seeds both from `seed`."""
    torch.manual_seed(seed)
    trajs = play(list(tasks), k, seed)
    if len(trajs) != len(tasks) * k:
        raise ValueError(f"the eval player returned {len(trajs)} trajectories for {len(tasks)} problems "
                         f"× k={k}; it must return k per problem, task-major")
    return trajs


def _correct(trajs: Sequence[Trajectory], k: int) -> torch.Tensor:
    """(N, k) float64: 1 where episode j of problem i is correct (task-major trajectories)."""
    return torch.tensor([t.is_correct for t in trajs], dtype=torch.float64).view(-1, k)


def shard_bounds(n: int, rank: int, world: int) -> tuple[int, int]:
    """Problems [lo, hi) of process `rank` of `world`: lo = rank·n // world, hi = (rank + 1)·n // world.

    Blocks are contiguous, whole problems, sizes differ by at most one; a process may get none (n < W).
    """
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"shard_bounds: need 0 <= rank < world, got rank={rank}, world={world}")
    return rank * n // world, (rank + 1) * n // world


def evaluate_set(play: PlayFn, model: nn.Module, tasks: Sequence[Any], *, k: int, seed: int, pad_id: int,
                 temperature: float, token_budget: int, device: torch.device | str = "cpu") -> dict[str,
                                                                                                    float]:
    """avg@k, pass@k, entropy, response length and tool calls on one set (keys without a prefix).

    This process plays its block of problems (`shard_bounds`); the sums of the module docstring are
    all-reduced. Every process must call it (collectives). A process whose block is empty (fewer
    problems than processes) still plays one group, of the first problem, and discards it: a policy
    whose first `generate` after an optimizer step is a collective (the vLLM weight push under FSDP
    or ZeRO-3, `training.rollout_engine`) then runs it on every process.
    """
    lo, hi = shard_bounds(len(tasks), distributed.rank(), distributed.world_size())
    block = list(tasks)[lo:hi] or list(tasks)[:1]       # [:1]: a placeholder group, discarded below
    trajs = _play_groups(play, block, k, seed + lo * k) if block else []
    trajs = trajs if hi > lo else []
    local = _local_sums(trajs, k)
    entropy_sum, tokens = _entropy_sums(model, trajs, pad_id=pad_id, temperature=temperature,
                                        token_budget=token_budget, device=device)
    sums = distributed.all_sum(torch.cat([local, torch.stack([entropy_sum, tokens])])).tolist()
    n, episodes = len(tasks), sums[4]
    return {f"avg@{k}": sums[0] / n if n else float("nan"), f"pass@{k}": sums[1] / n if n else float("nan"),
            "response_length": sums[2] / max(1.0, episodes), "tool_calls": sums[3] / max(1.0, episodes),
            "num_problems": float(n), "entropy": sums[5] / sums[6] if sums[6] > 0 else float("nan")}


def _local_sums(trajs: Sequence[Trajectory], k: int) -> torch.Tensor:
    """(5,) float64: Σ c_i / k, Σ 1[c_i > 0], Σ sampled tokens, Σ tool calls, episodes."""
    counts = _correct(trajs, k).sum(-1)                                                          # (n,)
    return torch.tensor([float(counts.sum()) / k, float((counts > 0).sum()),
                         float(sum(t.sampled_tokens for t in trajs)),
                         sum(float(t.metrics.get("tool_calls", 0)) for t in trajs), float(len(trajs))],
                        dtype=torch.float64)


def _entropy_sums(model: nn.Module, trajs: Sequence[Trajectory], *, pad_id: int, temperature: float,
                  token_budget: int, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """(Σ_t H_t·mask_t, Σ_t mask_t) as float64 scalars over this process's trajectories.

    A process without trajectories forwards one placeholder row (mask 0), so it joins the forward
    passes every process must run together under DDP / FSDP (`training.batch.equal_micro_batches`).
    """
    rows = [row for t in trajs for row in t.rows()]   # per-turn episodes: one row per turn
    rows = rows or [Trajectory(prompt_ids=[pad_id], response_ids=[pad_id], loss_mask=[0],
                               logprobs=[0.0], turn_index=[0], segment=[int(Segment.TOOL)])]
    batch = collate(rows, torch.zeros(len(rows)), pad_id=pad_id)
    was_training = model.training
    model.eval()
    _, entropy = batch_logprobs(model, batch, temperature, token_budget=token_budget, device=device)  # (B, R)
    model.train(was_training)
    mask = batch.loss_mask.double()                                                                # (B, R)
    return (entropy.double() * mask).sum(), mask.sum()


def evaluate(play: PlayFn, model: nn.Module, sets: Mapping[str, Sequence[Any]], *, k: int, seed: int,
             pad_id: int, temperature: float, token_budget: int,
             device: torch.device | str = "cpu") -> dict[str, float]:
    """`evaluate_set` on every set, keys `eval/<set>/<metric>` (e.g. eval/countdown-eval/avg@4).

    The RNG state of the caller is restored afterwards, so evaluating never changes training.
    """
    cpu_state = torch.get_rng_state()
    try:
        out: dict[str, float] = {}
        for name, tasks in sets.items():
            metrics = evaluate_set(play, model, tasks, k=k, seed=seed, pad_id=pad_id, temperature=temperature,
                                   token_budget=token_budget, device=device)
            out.update({f"eval/{name}/{key}": value for key, value in metrics.items()})
        return out
    finally:
        torch.set_rng_state(cpu_state)

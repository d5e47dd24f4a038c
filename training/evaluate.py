"""Held-out evaluation: avg@k and pass@k with the reference's validation sampling (T 1.0, top-p 0.7).

For a set of N problems with k samples each and c_i correct samples on problem i:

    avg@k  = (1/N) Σ_i c_i / k                 (the paper's "Acc avg@k")
    pass@k = (1/N) Σ_i 1[c_i > 0]

plus the token-mean entropy of the sampled (loss-mask) tokens under the evaluated model, the mean
sampled response length and tool calls per episode. Sampling is seeded with `eval.seed` at every
evaluation, so successive evaluations of a run differ only through the model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from agents.trajectory import Trajectory
from training.batch import collate
from training.logprobs import batch_logprobs, masked_token_mean

PlayFn = Callable[[list[Any], int, int], list[Trajectory]]
"""(tasks, group_size, seed) -> trajectories, task-major (validation sampling already bound)."""


def is_correct(traj: Trajectory) -> bool:
    """Graded correct (or, for envs without a grade, a positive reward)."""
    return traj.grade_status == "correct" or (not traj.grade_status and traj.reward > 0)


def score_groups(trajs: Sequence[Trajectory], k: int) -> dict[str, float]:
    """avg@k and pass@k of task-major trajectories, k per task."""
    if len(trajs) % k:
        raise ValueError(f"{len(trajs)} trajectories are not a whole number of groups of k={k}")
    correct = torch.tensor([is_correct(t) for t in trajs], dtype=torch.float32).view(-1, k)   # (N, k)
    return {f"avg@{k}": float(correct.mean()), f"pass@{k}": float((correct.sum(-1) > 0).float().mean())}


def evaluate_set(play: PlayFn, model: nn.Module, tasks: Sequence[Any], *, k: int, seed: int, pad_id: int,
                 temperature: float, token_budget: int, device: torch.device | str = "cpu") -> dict[str,
                                                                                                    float]:
    """avg@k, pass@k, entropy, response length and tool calls on one set (keys without a prefix)."""
    torch.manual_seed(seed)
    trajs = play(list(tasks), k, seed)
    out = score_groups(trajs, k)
    out["response_length"] = sum(sum(t.loss_mask) for t in trajs) / max(1, len(trajs))
    out["tool_calls"] = sum(float(t.metrics.get("tool_calls", 0)) for t in trajs) / max(1, len(trajs))
    out["num_problems"] = float(len(tasks))
    batch = collate(trajs, torch.zeros(len(trajs)), pad_id=pad_id)
    was_training = model.training
    model.eval()
    _, entropy = batch_logprobs(model, batch, temperature, token_budget=token_budget, device=device)
    model.train(was_training)
    out["entropy"] = masked_token_mean(entropy, batch.loss_mask)
    return out


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


def evaluate_model(cfg: Any, model_dir: Any = None) -> dict[str, float]:
    """`stare eval`: load a model (default `cfg.model.path`) and evaluate it on `cfg.eval.tasks`.

    Args:
        cfg: a `TrainConfig` (eval, rollout limits, data.env and model settings are used).
        model_dir: a model directory, or a run directory holding `model/`; None = cfg.model.path.

    Returns:
        `eval/<set>/<metric>` for every set.
    """
    from pathlib import Path

    from training import runtime
    if model_dir is not None:
        path = Path(model_dir)
        path = path / "model" if (path / "model" / "config.json").is_file() else path
        cfg = runtime.replace_cfg(cfg, model=runtime.dataclasses.replace(cfg.model, path=str(path)))
    if cfg.train.num_threads:
        torch.set_num_threads(cfg.train.num_threads)
    model, tokenizer = runtime.load_model_and_tokenizer(cfg, runtime.resolve_model_dir(cfg))
    model.eval()
    e = cfg.eval
    play = runtime.make_player(cfg, runtime.make_policy(model, tokenizer), tokenizer,
                               runtime.make_env_factory(cfg),
                               temperature=e.temperature, top_p=e.top_p)
    sets = {name: runtime.load_tasks(name, e.limit) for name in e.tasks}
    return evaluate(play, model, sets, k=e.k, seed=e.seed, pad_id=runtime.pad_id(tokenizer),
                    temperature=e.temperature, token_budget=cfg.train.micro_batch_tokens)

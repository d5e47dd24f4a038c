"""Per-puzzle held-out evaluation of a bench run (what the paired bootstrap and pass@k curves need).

For each sampling setting (T = 1 with top-p 1, the exploration-relevant one, and top-p 0.7, the
paper's validation protocol) every held-out puzzle i is played n times and its correct count c_i is
kept, with its difficulty. The record (`heldout.json` in the run directory):

    {"n": 8, "puzzles": [{"id", "difficulty"}...],
     "settings": {"top_p=1": {"correct": [c_i...], "entropy", "tool_calls", "response_length"}, ...}}

Unbiased pass@k (Chen et al. 2021) per puzzle: 1 − C(n − c, k) / C(n, k), averaged over puzzles.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

import stare
from envs.sandbox import LazyLocalSandbox
from training import runtime
from training.batch import collate
from training.logprobs import batch_logprobs

HELDOUT_FILE = "heldout.json"
START_DIR = "warmstart"
"""The bench's directory holding the warm start's own held-out record (before any RL step)."""
CHUNK = 16
"""Puzzles per rollout call (16 × n episodes live at once)."""


def setting_name(top_p: float) -> str:
    """`top_p=1`, `top_p=0.7`: the key of a sampling setting."""
    return f"top_p={top_p:g}"


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem with c correct of n samples: 1 − C(n−c, k)/C(n, k)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_curve(correct: Sequence[int], n: int) -> list[float]:
    """Mean unbiased pass@k over puzzles for k = 1..n."""
    return [sum(pass_at_k(n, c, k) for c in correct) / len(correct) for k in range(1, n + 1)]


def evaluate_heldout(
    run: Any, tasks: Sequence[Any], *, n: int, top_ps: Sequence[float], seed: int
) -> dict[str, Any]:
    """Play every task n times per top-p setting (T = 1) with the run's current model; returns the record."""
    cfg = run.cfg
    model = run.accelerator.unwrap_model(run.model)
    model.eval()
    policy = runtime.make_policy(model, run.tokenizer)
    box = LazyLocalSandbox()  # the run's own sandbox was closed by `fit`
    make_env = runtime.make_env_factory(cfg, box)
    record: dict[str, Any] = {
        "n": n,
        "puzzles": [{"id": t.id, "difficulty": t.meta.get("difficulty", "all")} for t in tasks],
        "settings": {},
    }
    state = torch.get_rng_state()
    with box:
        for top_p in top_ps:
            play = runtime.make_player(cfg, policy, run.tokenizer, make_env, temperature=1.0, top_p=top_p,
                                       sandbox=box)
            trajs: list[Any] = []
            for lo in range(0, len(tasks), CHUNK):
                torch.manual_seed(seed + lo)
                trajs += play(list(tasks[lo : lo + CHUNK]), n, seed + lo * n)
            record["settings"][setting_name(top_p)] = _setting_record(run, trajs, n)
    torch.set_rng_state(state)
    model.train()
    return record


def _setting_record(run: Any, trajs: list[Any], n: int) -> dict[str, Any]:
    correct = [sum(t.is_correct for t in trajs[i : i + n]) for i in range(0, len(trajs), n)]
    batch = collate(trajs, torch.zeros(len(trajs)), pad_id=run.pad_id)
    model = run.accelerator.unwrap_model(run.model)
    _, entropy = batch_logprobs(
        model,
        batch,
        run.cfg.rollout.temperature,
        token_budget=run.cfg.train.micro_batch_tokens,
        by_length=True,
    )
    return {
        "correct": correct,
        "entropy": float(stare.masked_mean(entropy, batch.loss_mask)),
        "tool_calls": sum(float(t.metrics.get("tool_calls", 0)) for t in trajs) / len(trajs),
        "response_length": sum(sum(t.loss_mask) for t in trajs) / len(trajs),
    }


def write_heldout(run_dir: Path, record: dict[str, Any]) -> None:
    """Write `heldout.json` into the run directory."""
    (Path(run_dir) / HELDOUT_FILE).write_text(json.dumps(record))


def read_heldout(run_dir: Path) -> dict[str, Any] | None:
    """The run's `heldout.json`, or None when it has none."""
    path = Path(run_dir) / HELDOUT_FILE
    return json.loads(path.read_text()) if path.exists() else None

"""One bench job in a worker process: a DAPO trunk, or one arm continued from a trunk checkpoint.

    trunk  <run_dir>/trunk-s<seed>/ : the baseline arm for `branch_step` steps, checkpoint at the end
    branch <run_dir>/<arm>-s<seed>/ : a copy of the trunk's checkpoint and metrics, resumed exactly
                                      (model, AdamW, data cursor, RNG) with the arm's algorithm and
                                      a fresh controller, to the last step; then the held-out
                                      evaluation (`heldout.json`)

Both arms of a seed therefore share steps 1..branch_step bit for bit, and differ only after. Every
job is an ordinary `stare train` run of the same preset, so `stare train ... --resume` continues it.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from envs.sandbox import LazyLocalSandbox
from training import runtime
from training.bench.heldout import evaluate_heldout, write_heldout
from training.bench.probe import StepObserver, probe_variants
from training.config import load_config
from training.trainer import fit, setup


@dataclass(frozen=True, kw_only=True)
class Job:
    """What one worker runs (picklable: it crosses the process pool)."""

    kind: str
    """"trunk", "branch", or "start" (no training: the warm start's held-out evaluation only)."""
    config: str
    """YAML preset or path."""
    overrides: tuple[str, ...]
    """The run's config overrides (algo, seed, run dir, name, steps...)."""
    arm: str
    seed: int
    trunk_dir: str = ""
    """Branch jobs: the trunk run directory whose last checkpoint they continue."""
    probe_path: str = ""
    """Probe episodes (torch.save'd trajectories); empty = no counterfactual probe in this run."""
    probe_every: int = 0
    """Counterfactual probe every this many steps (0 = off)."""
    probe_ws: tuple[float, ...] = (1.1, 2.0, 5.0)
    """STARE-O1 weights W of the counterfactual dose-response."""
    probe_top_ratio: float = 0.2
    """Top surprisal share of the counterfactual STARE variants."""
    heldout: dict[str, Any] = field(default_factory=dict)
    """Branch jobs: {"tasks", "limit", "n", "top_ps", "seed"} of the held-out evaluation."""


def run_job(job: Job) -> dict[str, Any]:
    """Run the job; returns {"kind", "arm", "seed", "dir", "wall_time_s", "cpu_s"}.

    `cpu_s` is this process's CPU time (the sandbox's interpreter processes excluded): on a shared
    machine it tells what the run would take on an idle core.
    """
    cfg = load_config(job.config, list(job.overrides))
    torch.set_num_threads(cfg.train.num_threads or 1)
    start, cpu = time.perf_counter(), time.process_time()
    if job.trunk_dir:
        _copy_trunk(Path(job.trunk_dir), cfg.run_path)
    run = setup(cfg, resume=bool(job.trunk_dir))
    if job.trunk_dir:
        run.controller = runtime.controller_for(run.algo)  # the arm's own gate from the branch point on
    probe = torch.load(job.probe_path, weights_only=False) if job.probe_path and job.probe_every else None
    variants = probe_variants(run.algo, job.probe_ws, job.probe_top_ratio) if probe else []
    run.on_batch = StepObserver(
        label=cfg.run_path.name, probe=probe, variants=variants, every=job.probe_every
    )
    if job.kind != "start":
        fit(run)
    if job.kind in ("branch", "start") and job.heldout:
        h = job.heldout
        tasks = runtime.load_tasks(h["tasks"], h["limit"])
        write_heldout(
            cfg.run_path, evaluate_heldout(run, tasks, n=h["n"], top_ps=h["top_ps"], seed=h["seed"])
        )
    return {
        "kind": job.kind,
        "arm": job.arm,
        "seed": job.seed,
        "dir": str(cfg.run_path),
        "wall_time_s": time.perf_counter() - start,
        "cpu_s": time.process_time() - cpu,
    }


def _copy_trunk(trunk: Path, run_dir: Path) -> None:
    """Start `run_dir` as a copy of the trunk's checkpoints and metrics (nothing else)."""
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    shutil.copytree(trunk / "checkpoints", run_dir / "checkpoints")
    shutil.copy2(trunk / "metrics.jsonl", run_dir / "metrics.jsonl")


def sample_probe(
    config: str, overrides: list[str], tasks_name: str, puzzles: int, per_puzzle: int, seed: int, out: Path
) -> int:
    """Sample the fixed probe episodes from the warm start (T = 1, top-p 1) and save them to `out`.

    Returns the number of episodes. The first `puzzles` of `tasks_name`, `per_puzzle` episodes each.
    """
    cfg = load_config(config, overrides)
    model_dir = runtime.resolve_model_dir(cfg)
    model, tokenizer = runtime.load_model_and_tokenizer(cfg, model_dir)
    model.eval()
    with LazyLocalSandbox() as box:
        make_env = runtime.make_env_factory(cfg, box)
        play = runtime.make_player(cfg, runtime.make_policy(model, tokenizer), tokenizer, make_env,
                                   temperature=1.0, top_p=1.0, sandbox=box)
        torch.manual_seed(seed)
        trajs = list(play(runtime.load_tasks(tasks_name, puzzles), per_puzzle, seed))
    torch.save(trajs, out)
    return len(trajs)

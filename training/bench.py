"""`stare bench`: train several algorithm arms on the same tasks, seeds and initial checkpoint; report.

    plan → warm start once (the shared initial checkpoint, cached) → runs `<arm>-s<seed>` in parallel
    worker processes (seed-major, so the two arms of a seed run side by side) → bench.json →
    `training.report.write_report` (report.md + PNG plots)

Every run is an ordinary `training.trainer.train` run of the same YAML preset with the overrides
`algo=<arm> seed=<seed>`, so a bench run can be reproduced or resumed with `stare train`.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH_FILE = "bench.json"
BENCH_DEFAULTS: dict[str, tuple[str, ...]] = {
    "cpu-tiny": (
        "train.steps=80",  # 3 seeds x 2 arms, two runs at a time: ~12 min of RL on 2 cores
        "rollout.prompts_per_step=8",  # 8 puzzles x group 8 = 64 episodes per step
        "algo.max_gen_rounds=1",  # dynamic sampling drops all-equal groups but does not refill
        "algo.stare.w=2.0",  # STARE-O1 as in CPU_DEMO part 2: W = 2 on the top 20% surprisal
        "algo.stare.top_ratio=0.2",
        "eval.limit=32",
        "eval.k=8",
        "eval.every=0",
        "eval.at_start=true",
        "log.save_every=0",
        "log.tensorboard=false",
    ),
}
"""Budget overrides `stare bench` applies to a preset before the user's own (`--no-defaults` skips them).

They size the run to about 15 minutes on 2 cores and are listed in every report; `stare train` with
the same overrides reproduces any run.
"""


@dataclass(frozen=True, kw_only=True)
class BenchPlan:
    """What one `stare bench` invocation runs."""

    config: str = "cpu-tiny"
    """YAML preset (name in configs/ or a path) every arm starts from."""
    arms: tuple[str, ...] = ("dapo", "stare-o1")
    """Algorithm presets (`stare algo list`); the first is the baseline of the paired differences."""
    seeds: tuple[int, ...] = (0, 1, 2)
    """Seeds; each arm runs every seed (same tasks, sampling seed and initial checkpoint)."""
    name: str = ""
    """Bench name: runs go to <run_dir>/<name>/<arm>-s<seed>/ (empty = bench-<config>-<time>)."""
    run_dir: str = "runs"
    """Parent directory of bench directories."""
    overrides: tuple[str, ...] = ()
    """Extra `key=value` config overrides applied to every arm (e.g. train.steps=60)."""
    workers: int = 2
    """Runs in parallel (processes)."""
    threads: int = 1
    """torch threads per worker (workers × threads ≈ cores)."""
    cache_dir: str = ".cache/stare"
    """Where the preset's warm start is built and cached (repo-local, git-ignored)."""
    band: float = 0.2
    """Relative half-width of the target-entropy band in the report."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Facts for the report header (e.g. the command line)."""
    use_defaults: bool = True
    """Apply `BENCH_DEFAULTS[config]` (when there are any) before `overrides`."""

    def __post_init__(self) -> None:
        if not self.arms or not self.seeds:
            raise ValueError(
                f"bench needs at least one arm and one seed, got arms={self.arms}, seeds={self.seeds}"
            )
        if len(set(self.arms)) != len(self.arms) or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(
                f"bench arms and seeds must be distinct, got arms={self.arms}, seeds={self.seeds}"
            )
        if self.workers < 1 or self.threads < 1:
            raise ValueError(f"bench workers and threads must be >= 1, got {self.workers}, {self.threads}")

    @property
    def all_overrides(self) -> tuple[str, ...]:
        """`BENCH_DEFAULTS` of the config (when used), then the user's overrides (later ones win)."""
        defaults = BENCH_DEFAULTS.get(self.config, ()) if self.use_defaults else ()
        return (*defaults, *self.overrides)

    @property
    def bench_dir(self) -> Path:
        """<run_dir>/<name>."""
        name = self.name or f"bench-{Path(self.config).stem}-{time.strftime('%Y%m%d-%H%M%S')}"
        return Path(self.run_dir).expanduser() / name


def arm_overrides(plan: BenchPlan, bench_dir: Path, arm: str, seed: int) -> list[str]:
    """The config overrides of run `<arm>-s<seed>` (the plan's overrides first; the run's identity last)."""
    return [
        f"model.cache_dir={plan.cache_dir}",
        *plan.all_overrides,
        f"algo={arm}",
        f"seed={seed}",
        f"log.run_dir={bench_dir}",
        f"log.name={arm}-s{seed}",
        "log.progress=false",
        f"train.num_threads={plan.threads}",
        "log.overwrite=true",
    ]


def _run_one(job: tuple[str, list[str], str, int]) -> dict[str, Any]:
    """Worker: one training run. Returns its identity, directory, wall time and the trainer's summary."""
    config, overrides, arm, seed = job
    import torch

    from training.config import load_config
    from training.trainer import train

    cfg = load_config(config, overrides)
    torch.set_num_threads(cfg.train.num_threads or 1)
    reserve_sandbox_sessions(cfg)
    start = time.perf_counter()
    summary = train(cfg)
    return {
        "arm": arm,
        "seed": seed,
        "dir": str(cfg.run_path),
        "wall_time_s": time.perf_counter() - start,
        "final": summary.get("final", {}),
        "eval": summary.get("eval", {}),
    }


def live_episodes(cfg: Any) -> int:
    """Most episodes one `rollout_batch` call of the run plays at once (a training round or an eval set).

    An evaluation without `eval.limit` is counted as 256 problems (the size of countdown-eval).
    """
    per_round = cfg.rollout.prompts_per_round or cfg.rollout.prompts_per_step
    evals = cfg.eval.k * (cfg.eval.limit or 256) if cfg.eval.tasks else 0
    return max(per_round * cfg.rollout.group_size, evals)


def reserve_sandbox_sessions(cfg: Any) -> None:
    """Reserve this process's shared local sandbox sessions for the run (`live_episodes(cfg)`).

    `stare/PythonTool-v0` opens one interpreter session per live episode. The trainer's rollout
    calls already grow the shared sandbox's cap to what each plays (`training.runtime.make_player`);
    this reserves the run's upper bound up front, without starting a sandbox the envs never use
    (`envs.sandbox.reserve_shared_sessions`).
    """
    from envs.sandbox import reserve_shared_sessions

    reserve_shared_sessions(live_episodes(cfg))


def prepare(plan: BenchPlan) -> dict[str, Any]:
    """Validate every arm's config and build (or find) the shared warm start, once, in this process.

    Returns:
        Facts for bench.json: model_dir, warmstart, target_entropy, steps, batch and eval settings.
    """
    from training.config import load_config
    from training.runtime import resolve_algo, resolve_model_dir

    cfgs = [load_config(plan.config, arm_overrides(plan, Path("."), arm, plan.seeds[0])) for arm in plan.arms]
    cfg = cfgs[0]
    model_dir = resolve_model_dir(cfg)
    facts: dict[str, Any] = {
        "model_dir": str(model_dir),
        "steps": cfg.train.steps,
        "prompts_per_step": cfg.rollout.prompts_per_step,
        "group_size": cfg.rollout.group_size,
        "lr": cfg.optim.lr,
        "eval": {
            "tasks": list(cfg.eval.tasks),
            "limit": cfg.eval.limit,
            "k": cfg.eval.k,
            "every": cfg.eval.every,
            "top_p": cfg.eval.top_p,
        },
    }
    if (model_dir / "warmstart.json").exists():
        facts["warmstart"] = json.loads((model_dir / "warmstart.json").read_text())
    stare_arms = [c for c in cfgs if c.algo.stare.enabled] or cfgs
    facts["target_entropy"] = float(resolve_algo(stare_arms[0], model_dir).stare.target_entropy)
    return facts


def _log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def run_bench(plan: BenchPlan) -> Path:
    """Run the plan and write the report; returns the path of report.md (see the module docstring)."""
    start = time.perf_counter()
    bench_dir = plan.bench_dir
    bench_dir.mkdir(parents=True, exist_ok=True)
    facts = prepare(plan)
    warm_s = time.perf_counter() - start
    _log(
        f"warm start ready in {warm_s:.0f} s: {facts['model_dir']} (target entropy {facts['target_entropy']})"
    )
    jobs = [
        (plan.config, arm_overrides(plan, bench_dir, arm, seed), arm, seed)
        for seed in plan.seeds
        for arm in plan.arms
    ]
    results = []
    ctx = multiprocessing.get_context("spawn")  # fresh interpreters: no forked torch / thread-pool state
    with ProcessPoolExecutor(max_workers=min(plan.workers, len(jobs)), mp_context=ctx) as pool:
        for result in pool.map(_run_one, jobs):
            _log(f"{result['arm']}-s{result['seed']} done in {result['wall_time_s']:.0f} s")
            results.append(result)
    total = time.perf_counter() - start
    record = {
        "config": plan.config,
        "arms": list(plan.arms),
        "seeds": list(plan.seeds),
        "band": plan.band,
        "overrides": list(plan.all_overrides),
        "workers": plan.workers,
        "threads": plan.threads,
        "warm_start_s": warm_s,
        "wall_time_s": total,
        "cpus": os.cpu_count(),
        **facts,
        **plan.extra,
        "runs": [{k: r[k] for k in ("arm", "seed", "dir", "wall_time_s")} for r in results],
    }
    (bench_dir / BENCH_FILE).write_text(json.dumps(record, indent=2, default=str))
    _log(f"all {len(results)} runs done; bench wall time {total:.0f} s")
    return report_from_dir(bench_dir)


def report_from_dir(bench_dir: Path | str, *, band: float | None = None) -> Path:
    """(Re)write report.md of a bench directory.

    Runs come from bench.json when present, else from every subdirectory named `<arm>-s<seed>` that
    holds a metrics.jsonl.
    """
    from training.report import load_run, write_report

    bench_dir = Path(bench_dir)
    record = json.loads((bench_dir / BENCH_FILE).read_text()) if (bench_dir / BENCH_FILE).exists() else {}
    if record.get("runs"):
        runs = []
        for r in record["runs"]:
            run = load_run(bench_dir / Path(r["dir"]).name, arm=r["arm"], seed=int(r["seed"]))
            run.wall_time_s = r.get("wall_time_s")
            runs.append(run)
    else:
        runs = [load_run(p) for p in sorted(bench_dir.iterdir()) if (p / "metrics.jsonl").exists()]
        if not runs:
            raise ValueError(f"{bench_dir}: no bench.json and no <arm>-s<seed>/metrics.jsonl runs inside")
    arms = record.get("arms") or list(dict.fromkeys(r.arm for r in runs))
    meta = _meta(record, bench_dir)
    return write_report(
        bench_dir,
        runs,
        target_entropy=record.get("target_entropy"),
        band=band if band is not None else record.get("band", 0.2),
        baseline=arms[0],
        meta=meta,
    )


def _meta(record: dict[str, Any], bench_dir: Path) -> dict[str, Any]:
    if not record:
        return {"title": f"Bench report: {bench_dir.name}"}
    meta: dict[str, Any] = {"title": f"STARE vs DAPO on `{record['config']}`: {bench_dir.name}"}
    if record.get("command"):
        meta["command"] = f"`{record['command']}`"
    meta["bench wall time"] = (
        f"{record['wall_time_s']:.0f} s in all ({record['warm_start_s']:.0f} s warm start), "
        f"{record['workers']} workers × {record['threads']} torch thread(s) on "
        f"{record['cpus']} CPUs"
    )
    meta["training"] = (
        f"{record.get('steps')} steps × {record.get('prompts_per_step')} prompts × group "
        f"{record.get('group_size')}, lr {record.get('lr')}; overrides: "
        f"{' '.join(record.get('overrides', [])) or 'none'}"
    )
    ev = record.get("eval") or {}
    when = f"every {ev['every']} steps and at the end" if ev.get("every") else "at the end"
    meta["evaluation"] = (
        f"{', '.join(ev.get('tasks', []))}: {ev.get('limit') or 'all'} problems × k={ev.get('k')} samples, "
        f"top-p {ev.get('top_p')}, {when} (step 0 too when eval.at_start is set)"
    )
    if record.get("warmstart"):
        ws = record["warmstart"]
        meta["warm start"] = (
            f"post-SFT entropy {ws.get('entropy', float('nan')):.3f}, pass@1 "
            f"{ws.get('pass@1', float('nan')):.3f}, pass@{ws.get('k')} "
            f"{ws.get('pass@k', float('nan')):.3f} (T=1, top-p 1), {ws.get('sft_steps')} "
            f"SFT steps, built in {ws.get('seconds', 0):.0f} s"
        )
        meta["warmstart"] = ws
    return meta


def parse_seeds(text: str) -> tuple[int, ...]:
    """Seeds from `0,1,2` (a list) or `n=3` (0, 1, 2)."""
    text = text.strip()
    if text.startswith("n="):
        return tuple(range(int(text[2:])))
    try:
        return tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError as err:
        raise ValueError(
            f"--seeds must be a comma-separated list of integers (e.g. 0,1,2) or n=<count>, got {text!r}"
        ) from err


def parse_arms(text: str | Sequence[str]) -> tuple[str, ...]:
    """Arms from `dapo,stare-o1`, each checked against the stare presets."""
    import stare

    arms = tuple(a.strip() for a in (text.split(",") if isinstance(text, str) else text) if a.strip())
    unknown = [a for a in arms if a not in stare.PRESETS]
    if unknown:
        raise ValueError(f"--arms: unknown algorithm preset(s) {unknown}; choose from {list(stare.PRESETS)}")
    return arms

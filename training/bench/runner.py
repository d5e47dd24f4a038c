"""`run_bench(plan)`: warm start → probe → trunks → target entropy → branches → bench.json → report.

    1. warm start (the shared initial checkpoint, built once and cached) and the fixed probe episodes
    2. one trunk per seed: the baseline arm for steps 1..b (b = round(branch_frac × steps))
    3. H_tgt = mean over seeds of the trunks' all-episode entropy over their last `target_window`
       steps (a stated rule, fixed before any arm differs; written into the report)
    4. every arm × seed continues its seed's trunk from step b to the end with H_tgt, then plays the
       per-puzzle held-out evaluation; the warm start plays the same evaluation once (`warmstart/`),
       so the report can say what RL added to the cold start
    5. bench.json (plan, facts, runs) and `training.bench.report.write_report`

Runs execute in `plan.workers` spawned processes; the baseline's trunk and branch carry the
counterfactual probe.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from training.bench.heldout import START_DIR
from training.bench.plan import BenchPlan, run_overrides
from training.bench.report import report_from_dir
from training.bench.runs import read_jsonl
from training.bench.worker import Job, run_job, sample_probe
from training.config import load_config
from training.runtime import resolve_model_dir

BENCH_FILE = "bench.json"
PROBE_FILE = "probe.pt"


def _log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def prepare(plan: BenchPlan, bench_dir: Path) -> dict[str, Any]:
    """Validate every arm's config, build (or find) the warm start and sample the probe, in this process.

    Returns:
        Facts for bench.json: model_dir, warmstart, steps, branch step, batch, lr, eval settings.
    """
    cfgs = [
        load_config(plan.config, run_overrides(plan, bench_dir, arm, plan.seeds[0], arm)) for arm in plan.arms
    ]
    cfg = cfgs[0]
    if plan.branch_frac and cfg.optim.schedule != "constant":
        raise ValueError(
            f"bench trunks need optim.schedule=constant (got {cfg.optim.schedule!r}): a trunk "
            "of b steps would otherwise follow another schedule than the full run"
        )
    model_dir = resolve_model_dir(cfg)
    facts: dict[str, Any] = {
        "model_dir": str(model_dir),
        "steps": cfg.train.steps,
        "branch_step": plan.branch_step(cfg.train.steps),
        "prompts_per_step": cfg.rollout.prompts_per_step,
        "group_size": cfg.rollout.group_size,
        "max_gen_rounds": cfg.algo.max_gen_rounds,
        "lr": cfg.optim.lr,
        "temperature": cfg.rollout.temperature,
        "top_p": cfg.rollout.top_p,
        "eval_tasks": cfg.eval.tasks[0] if cfg.eval.tasks else "countdown-eval",
    }
    if (model_dir / "warmstart.json").exists():
        facts["warmstart"] = json.loads((model_dir / "warmstart.json").read_text())
    if plan.probe_every:
        overrides = run_overrides(plan, bench_dir, plan.arms[0], 0, "probe")
        facts["probe_episodes"] = sample_probe(
            plan.config,
            overrides,
            facts["eval_tasks"],
            plan.probe_puzzles,
            plan.probe_samples,
            seed=12345,
            out=bench_dir / PROBE_FILE,
        )
    return facts


def trunk_target(trunk_dirs: list[Path], window: int) -> float:
    """H_tgt = mean over trunks of mean(train/entropy_all over the trunk's last `window` steps)."""
    per_seed = []
    for d in trunk_dirs:
        values = [
            float(r["train/entropy_all"])
            for r in read_jsonl(d / "metrics.jsonl")
            if r.get("train/entropy_all") is not None
        ]
        if not values:
            raise ValueError(f"{d}: the trunk logged no train/entropy_all; cannot fix the target entropy")
        per_seed.append(statistics.fmean(values[-window:]))
    return statistics.fmean(per_seed)


def _pool_run(plan: BenchPlan, jobs: list[Job]) -> list[dict[str, Any]]:
    ctx = multiprocessing.get_context("spawn")  # fresh interpreters: no forked torch / thread-pool state
    results = []
    with ProcessPoolExecutor(max_workers=min(plan.workers, len(jobs)), mp_context=ctx) as pool:
        for result in pool.map(run_job, jobs):
            _log(
                f"{Path(result['dir']).name} done in {result['wall_time_s']:.0f} s "
                f"({result['cpu_s']:.0f} CPU s)"
            )
            results.append(result)
    return results


def _job(
    plan: BenchPlan, facts: dict[str, Any], bench_dir: Path, kind: str, arm: str, seed: int, extra: list[str]
) -> Job:
    name = {"trunk": f"trunk-s{seed}", "start": START_DIR}.get(kind, f"{arm}-s{seed}")
    probed = plan.probe_every and arm == plan.arms[0] and kind != "start"
    return Job(
        kind=kind,
        config=plan.config,
        overrides=(*run_overrides(plan, bench_dir, arm, seed, name), *extra),
        arm=arm,
        seed=seed,
        trunk_dir=str(bench_dir / f"trunk-s{seed}") if kind == "branch" and facts["branch_step"] else "",
        probe_path=str(bench_dir / PROBE_FILE) if probed else "",
        probe_every=plan.probe_every if probed else 0,
        probe_ws=plan.probe_ws,
        heldout={
            "tasks": facts["eval_tasks"],
            "limit": plan.heldout_limit,
            "n": plan.heldout_n,
            "top_ps": list(plan.heldout_top_ps),
            "seed": 2024,
        }
        if kind in ("branch", "start")
        else {},
    )


def run_bench(plan: BenchPlan) -> Path:
    """Run the plan and write the report; returns the path of report.md (see the module docstring)."""
    start = time.perf_counter()
    bench_dir = plan.bench_dir
    bench_dir.mkdir(parents=True, exist_ok=True)
    facts = prepare(plan, bench_dir)
    warm_s = time.perf_counter() - start
    _log(f"warm start and probe ready in {warm_s:.0f} s: {facts['model_dir']}")
    b, trunks = facts["branch_step"], []
    warm_eval = _job(plan, facts, bench_dir, "start", plan.arms[0], plan.seeds[0], [])
    if b:
        jobs = [
            _job(plan, facts, bench_dir, "trunk", plan.arms[0], s, [f"train.steps={b}"]) for s in plan.seeds
        ]
        _log(f"trunks: {len(jobs)} seeds × {b} steps of {plan.arms[0]}, and the warm start's held-out")
        trunks = _pool_run(plan, [*jobs, warm_eval])
    target = (
        plan.target
        if plan.target is not None
        else trunk_target([bench_dir / f"trunk-s{s}" for s in plan.seeds], plan.target_window)
    )
    facts["target_entropy"] = target
    facts["target_rule"] = (
        f"fixed by the user: {target:.4f}"
        if plan.target is not None
        else f"mean over {len(plan.seeds)} seeds of the {plan.arms[0]} trunks' all-episode entropy "
        f"over steps {b - plan.target_window + 1}..{b}"
    )
    _log(f"target entropy {target:.4f} ({facts['target_rule']}); branches from step {b}")
    jobs = [
        _job(plan, facts, bench_dir, "branch", arm, s, [f"train.target_entropy={target}"])
        for s in plan.seeds
        for arm in plan.arms
    ]
    branches = _pool_run(plan, jobs if b else [*jobs, warm_eval])
    plan_record = {k: v for k, v in asdict(plan).items() if k != "extra"}
    record = {
        **plan_record,
        "overrides": list(plan.all_overrides),
        "warm_start_s": warm_s,
        "cpu_s": sum(r["cpu_s"] for r in trunks + branches),
        "wall_time_s": time.perf_counter() - start,
        "cpus": os.cpu_count(),
        **facts,
        **plan.extra,
        "runs": [
            {k: r[k] for k in ("kind", "arm", "seed", "dir", "wall_time_s", "cpu_s")}
            for r in trunks + branches
        ],
    }
    (bench_dir / BENCH_FILE).write_text(json.dumps(record, indent=2, default=str))
    _log(f"all {len(trunks) + len(branches)} runs done; bench wall time {record['wall_time_s']:.0f} s")
    return report_from_dir(bench_dir)

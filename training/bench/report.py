"""The bench report of a directory: runs → `analyse` → report.md, PNG plots and summary.json.

`report_from_dir(bench_dir)` reads bench.json (when present) and the arm runs, computes the
endpoints (`training.bench.analysis`), writes the plots (`training.bench.plots`), the markdown
(`training.bench.text`) and `summary.json` (schema in docs/bench.md). Nothing here trains.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from training.bench.analysis import LEARNING_GOAL, Results, analyse, power_line
from training.bench.heldout import START_DIR, read_heldout
from training.bench.plots import write_plots
from training.bench.runs import Run, load_bench_runs
from training.bench.text import PUSH_NAME, render_markdown

BENCH_FILE = "bench.json"
SUMMARY_FILE = "summary.json"
SCHEMA_VERSION = 1


def _num(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def summary(res: Results, record: dict[str, Any]) -> dict[str, Any]:
    """summary.json (docs/bench.md lists every field)."""
    out: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "arms": res.arms,
        "baseline": res.baseline,
        "seeds": res.seeds,
        "steps": res.steps,
        "branch_step": res.branch_step,
        "target_entropy": _num(res.target) if res.target else None,
        "target_rule": record.get("target_rule", ""),
        "wall_time_s": record.get("wall_time_s"),
        "learning": {
            arm: {
                "accuracy_gain": {k: v for k, v in e.as_dict().items() if k != "n"},
                "n_seeds": e.n,
                "goal_met": bool(e.n > 1 and e.mean >= LEARNING_GOAL and e.lo > 0),
            }
            for arm, e in res.learning.items()
        },
        "push": {name: e.as_dict() for name, e in res.push.items()},
        "push_excess": {name: e.as_dict() for name, e in res.push_excess.items() if name != "dapo"},
        "dlogp_correct": {name: e.as_dict() for name, e in res.dlogp.items()},
        "entropy_endpoints": {},
        "heldout": {},
    }
    for arm, rows in res.paired.items():
        p, pl = rows["entropy_all"], power_line(res, arm, PUSH_NAME)
        out["entropy_endpoints"][arm] = {
            "mean": _num(p.estimate.mean),
            "ci95": [_num(p.estimate.lo), _num(p.estimate.hi)],
            "mde80": _num(p.mde80),
            "n_seeds": p.estimate.n,
            "t_p": _num(p.t_p),
            "sign_p": _num(p.sign_p),
            "expected_gap": _num(pl.get("expected_gap", math.nan)),
            "seeds_needed": _num(pl.get("seeds_needed", math.nan)),
        }
    if res.paired:
        first = next(iter(res.paired))
        out["entropy_endpoint"] = {"arm": first, **out["entropy_endpoints"][first]}
    out["heldout_start"] = res.heldout_start
    out["heldout_gain"] = {
        setting: {arm: e.as_dict() for arm, e in by_arm.items()}
        for setting, by_arm in res.heldout_gain.items()
    }
    for setting, by_arm in res.heldout.items():
        out["heldout"][setting] = {
            arm: {f"pass@{k + 1}": e.as_dict() for k, e in enumerate(agg["curve"])}
            for arm, agg in by_arm.items()
        }
    return out


def _meta(record: dict[str, Any], bench_dir: Path) -> dict[str, Any]:
    if not record:
        return {"title": f"Bench report: {bench_dir.name}"}
    meta: dict[str, Any] = {
        "title": f"{' vs '.join(record['arms'])} on `{record['config']}`: {bench_dir.name}"
    }
    if record.get("command"):
        meta["command"] = f"`{record['command']}`"
    meta["wall time"] = (
        f"{record['wall_time_s']:.0f} s in all ({record['warm_start_s']:.0f} s warm start and "
        f"probe), {record['workers']} workers × {record['threads']} torch thread(s) on "
        f"{record['cpus']} CPUs; the runs used {record.get('cpu_s', 0):.0f} CPU s (worker processes)"
    )
    meta["training"] = (
        f"{record['steps']} steps × {record['prompts_per_step']} prompts × group "
        f"{record['group_size']}, dynamic sampling with up to {record['max_gen_rounds']} "
        f"generation rounds, lr {record['lr']}, T={record['temperature']}, top-p {record['top_p']}; "
        f"overrides: {' '.join(record.get('overrides', [])) or 'none'}"
    )
    meta["design"] = (
        f"per seed one {record['arms'][0]} trunk for steps 1..{record['branch_step']}, then every arm "
        f"continues from its checkpoint; seeds {record['seeds']}"
    )
    meta["target entropy"] = f"H_tgt = {record['target_entropy']:.4f}: {record.get('target_rule', '')}"
    meta["held-out"] = (
        f"{record['eval_tasks']}: first {record['heldout_limit']} puzzles × {record['heldout_n']} "
        f"samples at T=1 with top-p {', '.join(f'{p:g}' for p in record['heldout_top_ps'])}"
    )
    if record.get("probe_every"):
        meta["probe"] = (
            f"{record.get('probe_episodes')} held-out episodes sampled once from the warm start; "
            f"counterfactual updates every {record['probe_every']} steps of the {record['arms'][0]} "
            f"trajectory (trunk and branch)"
        )
    if record.get("warmstart"):
        ws = record["warmstart"]
        meta["warm start"] = (
            f"entropy {ws.get('entropy', math.nan):.3f}, pass@1 {ws.get('pass@1', math.nan):.3f}, "
            f"pass@{ws.get('k')} {ws.get('pass@k', math.nan):.3f} (T=1, top-p 1, "
            f"{ws.get('eval_problems')} held-out puzzles), {ws.get('num_demos')} demonstrations "
            f"(success {ws.get('demo_success', math.nan):.2f}), {ws.get('sft_steps')} SFT steps"
        )
    return meta


def write_report(
    out_dir: Path,
    runs: list[Run],
    *,
    arms: list[str],
    baseline: str,
    branch_step: int,
    target: float | None,
    band: float,
    record: dict[str, Any],
    plots: bool = True,
    start: dict[str, Any] | None = None,
) -> Path:
    """Write report.md, summary.json and the plots into `out_dir`; returns the report path."""
    if not runs:
        raise ValueError("write_report needs at least one run")
    out_dir.mkdir(parents=True, exist_ok=True)
    res = analyse(runs, arms=arms, baseline=baseline, branch_step=branch_step, target=target, band=band,
                  start=start)
    figures = write_plots(out_dir, runs, res) if plots else []
    (out_dir / SUMMARY_FILE).write_text(json.dumps(summary(res, record), indent=2))
    path = out_dir / "report.md"
    path.write_text(render_markdown(res, _meta(record, out_dir), figures))
    return path


def report_from_dir(bench_dir: Path | str, *, band: float | None = None) -> Path:
    """(Re)write report.md and summary.json of a bench directory (bench.json optional)."""
    bench_dir = Path(bench_dir)
    record = json.loads((bench_dir / BENCH_FILE).read_text()) if (bench_dir / BENCH_FILE).exists() else {}
    runs = load_bench_runs(bench_dir, record)
    arms = record.get("arms") or list(dict.fromkeys(r.arm for r in runs))
    targets = [r.series("stare/target_entropy") for r in runs]
    logged = next((t[-1] for t in targets if t), None)      # the last step's: after any branch point
    return write_report(
        bench_dir,
        runs,
        arms=arms,
        baseline=arms[0],
        branch_step=int(record.get("branch_step", 0)),
        target=record.get("target_entropy", logged),
        band=band if band is not None else record.get("band", 0.2),
        record=record,
        start=read_heldout(bench_dir / START_DIR),
    )

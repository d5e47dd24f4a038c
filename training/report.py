"""The STARE-vs-baseline report, built from run directories' `metrics.jsonl` and `eval.jsonl` alone.

`write_report(out_dir, runs)` reads each run, summarises it (final and best accuracy, held-out
avg@k / pass@k, share of steps with entropy inside the target band, gate-on rate, response length,
tool calls, reflection words, wall time), aggregates each arm over seeds as mean ± 95% CI
(Student t), computes paired differences against the baseline arm after the first gate step, and
writes `report.md` plus PNG plots (`training.report_plots`). Nothing here trains or samples.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from training.report_text import render_markdown

# Two-sided 95% Student-t quantiles t_{0.975, df} for df = 1..30; 1.96 beyond.
_T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)
EVAL_KEY = re.compile(r"^eval/(?P<set>.+)/(?P<name>avg@\d+|pass@\d+|avg@k|pass@k|entropy|tool_calls)$")


@dataclass
class Run:
    """One training run: its arm (algorithm preset), seed and logged records."""

    arm: str
    seed: int
    path: Path
    metrics: list[dict[str, Any]] = field(default_factory=list)
    """One record per training step (metrics.jsonl)."""
    evals: list[dict[str, Any]] = field(default_factory=list)
    """One record per evaluation (eval.jsonl)."""
    wall_time_s: float | None = None
    """Wall time of the whole run (training + evals) when the bench recorded it."""

    def series(self, key: str) -> list[float]:
        """Values of `key` over steps, skipping records without it."""
        return [float(r[key]) for r in self.metrics if r.get(key) is not None]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Records of a JSONL file (blank lines skipped); a missing file gives [].

    Raises:
        ValueError: A line is not a JSON object; the message names the file and line.
    """
    if not path.exists():
        return []
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{n}: not valid JSON ({err.msg}); fix or remove the line") from err
        if not isinstance(record, dict):
            raise ValueError(f"{path}:{n}: expected a JSON object per line, got {type(record).__name__}")
        out.append(record)
    return out


def load_run(path: Path | str, *, arm: str | None = None, seed: int | None = None) -> Run:
    """Read a run directory. Arm and seed default to the directory name `<arm>-s<seed>`."""
    path = Path(path)
    match = re.fullmatch(r"(?P<arm>.+)-s(?P<seed>\d+)", path.name)
    if (arm is None or seed is None) and match is None:
        raise ValueError(
            f"{path}: cannot tell arm and seed from the name; name it <arm>-s<seed> or pass them"
        )
    run = Run(
        arm=arm if arm is not None else match["arm"],
        seed=seed if seed is not None else int(match["seed"]),
        path=path,
        metrics=read_jsonl(path / "metrics.jsonl"),
        evals=read_jsonl(path / "eval.jsonl"),
    )
    if not run.metrics:
        raise ValueError(f"{path}: no metrics.jsonl records; is this a training run directory?")
    return run


# ---- statistics ---------------------------------------------------------------------------------


def mean_ci(values: Sequence[float]) -> tuple[float, float, int]:
    """Mean, 95% CI half-width (Student t over seeds; nan for n < 2) and n, ignoring NaNs."""
    xs = [v for v in values if v is not None and not math.isnan(v)]
    if not xs:
        return math.nan, math.nan, 0
    if len(xs) == 1:
        return xs[0], math.nan, 1
    t = _T975[len(xs) - 2] if len(xs) - 1 <= len(_T975) else 1.96
    return statistics.fmean(xs), t * statistics.stdev(xs) / math.sqrt(len(xs)), len(xs)


def _tail_mean(xs: Sequence[float], frac: float = 0.1) -> float:
    """Mean of the last max(1, frac·n) values (the 'final' value of a noisy per-step curve)."""
    if not xs:
        return math.nan
    k = max(1, int(len(xs) * frac))
    return statistics.fmean(xs[-k:])


def moving_average(xs: Sequence[float], window: int) -> list[float]:
    """Trailing moving average: y_t = mean(x_{max(0, t-w+1)..t})."""
    out, acc = [], 0.0
    for t, x in enumerate(xs):
        acc += x
        if t >= window:
            acc -= xs[t - window]
        out.append(acc / min(t + 1, window))
    return out


def target_of(run: Run, default: float | None) -> float | None:
    """The run's target entropy: the logged `stare/target_entropy` (first positive value), else `default`."""
    logged = [v for v in run.series("stare/target_entropy") if v > 0]
    return logged[0] if logged else default


def first_gate_step(run: Run) -> int | None:
    """Step of the first record with `stare/gate_on` > 0, or None when the gate never fired."""
    for r in run.metrics:
        if (r.get("stare/gate_on") or 0) > 0:
            return int(r["step"])
    return None


def eval_metrics(run: Run) -> dict[str, dict[str, float]]:
    """`{"<set>/<name>": {"final": v_last, "best": max_v, "first": v_first}}` over the run's evals."""
    series: dict[str, list[float]] = {}
    for record in run.evals:
        for key, value in record.items():
            m = EVAL_KEY.match(key)
            if m and value is not None:
                series.setdefault(f"{m['set']}/{m['name']}", []).append(float(value))
    return {k: {"first": v[0], "final": v[-1], "best": max(v)} for k, v in series.items()}


def summarise(run: Run, *, target: float | None, band: float) -> dict[str, float]:
    """Scalar summary of one run (see the module docstring); NaN where a metric was not logged."""
    entropy = run.series("train/entropy")
    acc = run.series("train/acc") or run.series("train/reward")
    tgt = target_of(run, target)
    lo, hi = (tgt * (1 - band), tgt * (1 + band)) if tgt else (math.nan, math.nan)
    gate = run.series("stare/gate_on")
    steps_s = run.series("time/step_s")
    out = {
        "train_acc_final": _tail_mean(acc),
        "train_acc_best": max(moving_average(acc, 10)) if acc else math.nan,
        "entropy_final": _tail_mean(entropy),
        "in_band": (sum(lo <= h <= hi for h in entropy) / len(entropy)) if entropy and tgt else math.nan,
        "gate_rate": statistics.fmean(gate) if gate else 0.0,
        "response_length": _tail_mean(run.series("train/response_length")),
        "tool_calls": _tail_mean(run.series("train/tool_calls")),
        "reflection_words": _tail_mean(run.series("train/reflection_words")),
        "wall_time_s": run.wall_time_s
        if run.wall_time_s is not None
        else (sum(steps_s) if steps_s else math.nan),
        "steps": float(len(run.metrics)),
        "first_gate_step": math.nan if first_gate_step(run) is None else float(first_gate_step(run)),
    }
    start = run.evals[0].get("step") == 0 if run.evals else False
    for key, vals in eval_metrics(run).items():
        out[f"eval/{key}"] = vals["final"]
        if start:
            out[f"eval/{key}/start"] = vals["first"]
        if "@" in key:
            out[f"eval/{key}/best"] = vals["best"]
    return out


PAIRED_SERIES = ("train/entropy", "train/acc", "train/tool_calls", "train/response_length")


def paired_differences(base: Run, other: Run) -> dict[str, float] | None:
    """Differences other − base for one seed, from `other`'s first gate step on (None if never gated).

    Per-step series: mean over steps s ≥ g of (x_other(s) − x_base(s)), steps matched by number.
    Evaluations: final value difference (the last eval is after the gate in any gated run).
    """
    g = first_gate_step(other)
    if g is None:
        return None
    out: dict[str, float] = {"first_gate_step": float(g)}
    base_by_step = {int(r["step"]): r for r in base.metrics}
    for key in PAIRED_SERIES:
        diffs = [
            float(r[key]) - float(base_by_step[int(r["step"])][key])
            for r in other.metrics
            if int(r["step"]) >= g
            and r.get(key) is not None
            and base_by_step.get(int(r["step"]), {}).get(key) is not None
        ]
        out[key] = statistics.fmean(diffs) if diffs else math.nan
    base_eval, other_eval = eval_metrics(base), eval_metrics(other)
    for key in sorted(set(base_eval) & set(other_eval)):
        out[f"eval/{key}"] = other_eval[key]["final"] - base_eval[key]["final"]
    return out


# ---- the report ---------------------------------------------------------------------------------


def write_report(
    out_dir: Path | str,
    runs: Sequence[Run],
    *,
    target_entropy: float | None = None,
    band: float = 0.2,
    baseline: str = "dapo",
    meta: dict[str, Any] | None = None,
    plots: bool = True,
) -> Path:
    """Write `report.md` (and the PNG plots) for `runs` into `out_dir`; returns the report path.

    Args:
        out_dir: Destination directory (created).
        runs: Runs of one or more arms; seeds pair runs across arms.
        target_entropy: H_tgt when the runs did not log `stare/target_entropy`.
        band: Relative half-width δ of the target band [H_tgt(1−δ), H_tgt(1+δ)].
        baseline: Arm the others are paired against (the first arm when absent).
        meta: Extra facts for the header (preset, warm start, command, bench wall time, ...).
        plots: Also write the PNG plots.
    """
    if not runs:
        raise ValueError("write_report needs at least one run")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    arms = list(dict.fromkeys(r.arm for r in runs))
    base = baseline if baseline in arms else arms[0]
    target = (
        target_entropy
        if target_entropy is not None
        else next((t for t in (target_of(r, None) for r in runs) if t), None)
    )
    summaries = {(r.arm, r.seed): summarise(r, target=target, band=band) for r in runs}
    by_arm_seed = {(r.arm, r.seed): r for r in runs}
    paired = {
        arm: {
            seed: paired_differences(by_arm_seed[base, seed], by_arm_seed[arm, seed])
            for (a, seed) in by_arm_seed
            if a == arm and (base, seed) in by_arm_seed
        }
        for arm in arms
        if arm != base
    }
    figures = []
    if plots:
        from training.report_plots import write_plots

        figures = write_plots(out_dir, runs, target=target, band=band)
    text = render_markdown(
        arms=arms,
        baseline=base,
        runs=runs,
        summaries=summaries,
        paired=paired,
        target=target,
        band=band,
        meta=meta or {},
        figures=figures,
        mean_ci=mean_ci,
    )
    path = out_dir / "report.md"
    path.write_text(text)
    return path

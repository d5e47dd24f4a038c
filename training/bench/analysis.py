"""The bench's pre-registered endpoints, computed from runs alone (nothing here trains or samples).

Fixed before any result is seen (docs/bench.md):

    learning     per arm: accuracy_gain = mean train/acc over the last 10% of steps − first 10%
    entropy      per arm ≠ baseline, paired by seed: mean train/entropy_all over the last 40% of steps,
                 other − baseline; paired t, sign test, MDE at 80% power from the observed spread
    slope        least-squares slope of train/entropy_all over the steps after the branch point
    band         share of steps after the branch point with the entropy in [H_tgt(1 − δ), H_tgt(1 + δ)]
    behaviour    tool calls and response length over the last 40% (paired differences)
    held-out     per sampling setting: pass@1 and unbiased pass@k (k = 1..n), easy / hard, and the
                 paired difference of per-puzzle scores (averaged over seeds) with a puzzle bootstrap
    push         probe/dH/<v> per counterfactual update, pooled over steps, CI by block bootstrap over
                 seeds; excess over DAPO (same step) and ratio to DAPO's |ΔH|; the same for Δlog p
    batch        kept groups, refill rounds, steps without update, quadrant |A| shares, gate-on share
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import stare
from training.bench.heldout import pass_at_k, pass_curve
from training.bench.runs import Run
from training.bench.stats import (
    Estimate,
    block_bootstrap,
    mde80,
    mean_ci,
    paired_test,
    puzzle_bootstrap,
    seeds_needed,
    slope,
)

FIRST_FRAC, LAST_FRAC, WINDOW_FRAC = 0.1, 0.1, 0.4
"""First / last 10% for the learning gain; the last 40% for the entropy and behaviour endpoints."""
ENTROPY_ALL, ENTROPY_GATE = "train/entropy_all", "train/entropy"
QUADRANTS = ("pos_high", "pos_low", "neg_high", "neg_low")
LEARNING_GOAL = 0.15


@dataclass
class Paired:
    """A paired (by seed) endpoint: per-seed differences other − baseline and their tests."""

    estimate: Estimate
    diffs: list[float]
    t_p: float
    sign_p: float
    positive: int
    mde80: float


@dataclass
class Results:
    """Everything the report text, the plots and summary.json show."""

    arms: list[str]
    baseline: str
    seeds: list[int]
    steps: int
    branch_step: int
    target: float | None
    band: float
    learning: dict[str, Estimate] = field(default_factory=dict)
    per_arm: dict[str, dict[str, Estimate]] = field(default_factory=dict)
    paired: dict[str, dict[str, Paired]] = field(default_factory=dict)
    heldout: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    heldout_paired: dict[str, dict[str, dict[str, Estimate]]] = field(default_factory=dict)
    heldout_start: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per setting: the warm start's pass@1 and pass@n on the same puzzles, samples and seeds."""
    heldout_gain: dict[str, dict[str, Estimate]] = field(default_factory=dict)
    """Per setting and arm: pass@1 after RL minus the warm start's, per seed the mean over puzzles of
    (c_i − c0_i) / n, then mean and t-CI over seeds (what RL added to the cold start)."""
    push: dict[str, Estimate] = field(default_factory=dict)
    push_excess: dict[str, Estimate] = field(default_factory=dict)
    dlogp: dict[str, Estimate] = field(default_factory=dict)
    gated: dict[str, list[str]] = field(default_factory=dict)
    """Arms with a gate: per seed, the gate raster as a string of 0/1 over the steps after the branch."""


def _window(run: Run, key: str, frac: float, *, last: bool = True) -> float:
    """Mean of `key` over the last (or first) max(1, round(frac·N)) steps, N = the run's last step."""
    steps = run.steps_of(key)
    if not steps:
        return math.nan
    n = max(steps)
    k = max(1, round(frac * n))
    vals = [v for s, v in zip(steps, run.series(key), strict=True) if (s > n - k if last else s <= k)]
    return statistics.fmean(vals) if vals else math.nan


def accuracy_gain(run: Run) -> float:
    """Mean train/acc over the last 10% of steps minus the first 10%."""
    return _window(run, "train/acc", LAST_FRAC) - _window(run, "train/acc", FIRST_FRAC, last=False)


def run_endpoints(run: Run, *, branch: int, target: float | None, band: float) -> dict[str, float]:
    """The per-run scalar endpoints (see the module docstring)."""
    after = [(s, v) for s, v in run.by_step(ENTROPY_ALL).items() if s > branch]
    gate_after = [v for s, v in run.by_step(ENTROPY_GATE).items() if s > branch]
    lo, hi = (target * (1 - band), target * (1 + band)) if target else (math.nan, math.nan)
    kept = run.series("train/groups_kept")
    out = {
        "accuracy_gain": accuracy_gain(run),
        "acc_last": _window(run, "train/acc", LAST_FRAC),
        "entropy_all": _window(run, ENTROPY_ALL, WINDOW_FRAC),
        "entropy_gate": _window(run, ENTROPY_GATE, WINDOW_FRAC),
        "slope": slope([s for s, _ in after], [v for _, v in after]),
        "in_band_all": float(np.mean([lo <= v <= hi for _, v in after])) if after and target else math.nan,
        "in_band_gate": float(np.mean([lo <= v <= hi for v in gate_after]))
        if gate_after and target
        else math.nan,
        "tool_calls": _window(run, "train/tool_calls", WINDOW_FRAC),
        "response_length": _window(run, "train/response_length", WINDOW_FRAC),
        "groups_kept": float(np.mean(kept)) if kept else math.nan,
        "gen_rounds": float(np.mean(run.series("train/gen_rounds") or [math.nan])),
        "no_update": float(np.mean([k == 0 for k in kept])) if kept else math.nan,
        "gate_on": float(
            np.mean([v for s, v in run.by_step("stare/gate_on").items() if s > branch] or [0.0])
        ),
    }
    for q in QUADRANTS:
        out[f"adv_share_{q}"] = _window(run, f"quadrant/{q}/adv_share", 1.0)
    return out


PAIRED_KEYS = (
    "entropy_all",
    "entropy_gate",
    "slope",
    "in_band_all",
    "tool_calls",
    "response_length",
    "acc_last",
)


def _paired(diffs: list[float]) -> Paired:
    t_p, sign_p, positive = paired_test(diffs)
    clean = [d for d in diffs if not math.isnan(d)]
    sd = statistics.stdev(clean) if len(clean) > 1 else math.nan
    return Paired(mean_ci(diffs), diffs, t_p, sign_p, positive, mde80(sd, len(clean)))


def heldout_scores(run: Run, setting: str) -> dict[str, Any] | None:
    """pass@1, the pass@k curve and per-difficulty pass@1 / pass@n of one run and setting."""
    h = run.heldout
    if not h or setting not in h["settings"]:
        return None
    n, correct = h["n"], h["settings"][setting]["correct"]
    levels = [p["difficulty"] for p in h["puzzles"]]
    out: dict[str, Any] = {
        "curve": pass_curve(correct, n),
        "n": n,
        **{k: h["settings"][setting][k] for k in ("entropy", "tool_calls", "response_length")},
    }
    for level in sorted(set(levels)):
        picked = [c for c, lv in zip(correct, levels, strict=True) if lv == level]
        out[f"pass@1/{level}"] = float(np.mean([c / n for c in picked]))
        out[f"pass@{n}/{level}"] = float(np.mean([c > 0 for c in picked]))
    return out


def _heldout(res: Results, runs: list[Run]) -> None:
    settings = sorted({s for r in runs if r.heldout for s in r.heldout["settings"]}, reverse=True)
    for setting in settings:
        for arm in res.arms:
            scores = [x for r in runs if r.arm == arm and (x := heldout_scores(r, setting))]
            if not scores:
                continue
            n = scores[0]["n"]
            agg = {"curve": [mean_ci([s["curve"][k] for s in scores]) for k in range(n)], "n": n}
            for key in scores[0]:
                if key not in ("curve", "n"):
                    agg[key] = mean_ci([s[key] for s in scores])
            res.heldout.setdefault(setting, {})[arm] = agg
        for arm in res.arms:
            if arm != res.baseline:
                res.heldout_paired.setdefault(setting, {})[arm] = _puzzle_pairs(
                    runs, res.baseline, arm, setting
                )


def _start_gain(res: Results, runs: list[Run], start: dict[str, Any]) -> None:
    """`heldout_start` and `heldout_gain` from the warm start's held-out record (same puzzles and seeds)."""
    n = start["n"]
    for setting, rec in start["settings"].items():
        c0 = rec["correct"]
        res.heldout_start[setting] = {"pass@1": float(np.mean(c0)) / n,
                                      f"pass@{n}": float(np.mean([c > 0 for c in c0]))}
        for arm in res.arms:
            per_seed = [
                float(np.mean([(c - b) / n for c, b in zip(r.heldout["settings"][setting]["correct"], c0,
                                                           strict=True)]))
                for r in runs
                if r.arm == arm and r.heldout and setting in r.heldout["settings"] and r.heldout["n"] == n
            ]
            if per_seed:
                res.heldout_gain.setdefault(setting, {})[arm] = mean_ci(per_seed)


def _puzzle_pairs(runs: list[Run], base: str, arm: str, setting: str) -> dict[str, Estimate]:
    """Paired per-puzzle pass@1 and pass@n differences (scores averaged over the seeds both arms ran)."""
    seeds = sorted(
        {r.seed for r in runs if r.arm == base and r.heldout}
        & {r.seed for r in runs if r.arm == arm and r.heldout}
    )
    if not seeds:
        return {}
    by = {(r.arm, r.seed): r.heldout for r in runs if r.heldout}
    n = by[base, seeds[0]]["n"]
    out = {}
    for k in (1, n):
        a = np.mean(
            [[pass_at_k(n, c, k) for c in by[base, s]["settings"][setting]["correct"]] for s in seeds], 0
        )
        b = np.mean(
            [[pass_at_k(n, c, k) for c in by[arm, s]["settings"][setting]["correct"]] for s in seeds], 0
        )
        out[f"pass@{k}"] = puzzle_bootstrap(a, b)
    return out


def _variant_order(name: str) -> tuple[int, float, str]:
    """Sort key of counterfactual names: `dapo`, then STARE-O1 by W, then the rest by name."""
    if name == "dapo":
        return (0, 0.0, name)
    if "-o1-w" in name:
        return (1, float(name.rsplit("-w", 1)[1]), name)
    return (2, 0.0, name)


def _push(res: Results, runs: list[Run]) -> None:
    base_runs = [r for r in runs if r.arm == res.baseline]
    logged = {key for r in base_runs for rec in r.metrics for key in rec if key.startswith("probe/dH/")}
    names = sorted((key.split("/", 2)[2] for key in logged), key=_variant_order)
    for name in names:
        res.push[name] = block_bootstrap([r.series(f"probe/dH/{name}") for r in base_runs])
        res.dlogp[name] = block_bootstrap([r.series(f"probe/dlogp/{name}") for r in base_runs])
        excess = [
            [
                rec[f"probe/dH/{name}"] - rec["probe/dH/dapo"]
                for rec in r.metrics
                if rec.get(f"probe/dH/{name}") is not None and rec.get("probe/dH/dapo") is not None
            ]
            for r in base_runs
        ]
        res.push_excess[name] = block_bootstrap(excess)


def analyse(
    runs: list[Run], *, arms: list[str], baseline: str, branch_step: int, target: float | None, band: float,
    start: dict[str, Any] | None = None,
) -> Results:
    """All endpoints of a bench (see the module docstring); `start` = the warm start's heldout.json."""
    seeds = sorted({r.seed for r in runs})
    steps = max(int(r.metrics[-1]["step"]) for r in runs)
    res = Results(
        arms=arms,
        baseline=baseline,
        seeds=seeds,
        steps=steps,
        branch_step=branch_step,
        target=target,
        band=band,
    )
    ends = {(r.arm, r.seed): run_endpoints(r, branch=branch_step, target=target, band=band) for r in runs}
    for (arm, _), e in ends.items():
        if not has_gate(arm):
            e["gate_on"] = math.nan       # the controller ran, but this arm never reweights
    for arm in arms:
        mine = [e for (a, _), e in ends.items() if a == arm]
        res.per_arm[arm] = {key: mean_ci([e[key] for e in mine]) for key in (mine[0] if mine else {})}
        res.learning[arm] = res.per_arm[arm].get("accuracy_gain", mean_ci([]))
        if arm != baseline:
            both = [s for s in seeds if (arm, s) in ends and (baseline, s) in ends]
            res.paired[arm] = {
                key: _paired([ends[arm, s][key] - ends[baseline, s][key] for s in both])
                for key in PAIRED_KEYS
            }
        gate_runs = [r for r in runs if r.arm == arm and has_gate(arm)]
        if gate_runs:
            res.gated[arm] = [
                "".join(str(int(v)) for s, v in r.by_step("stare/gate_on").items() if s > branch_step)
                for r in sorted(gate_runs, key=lambda r: r.seed)
            ]
    _heldout(res, runs)
    if start:
        _start_gain(res, runs, start)
    _push(res, runs)
    return res


def has_gate(arm: str) -> bool:
    """Whether the arm's algorithm reweights when its gate is on (a STARE preset).

    Every arm logs `stare/gate_on` (the controller runs for all), so the log alone cannot tell.
    """
    preset = stare.PRESETS.get(arm)
    return preset is not None and preset.stare.enabled


def expected_gap(res: Results, name: str, arm: str) -> float:
    """Entropy gap the push predicts for `arm`: excess push of `name` × gated steps after the branch."""
    push = res.push_excess.get(name)
    gate = res.per_arm.get(arm, {}).get("gate_on")
    if push is None or gate is None:
        return math.nan
    return push.mean * gate.mean * (res.steps - res.branch_step)


def power_line(res: Results, arm: str, name: str) -> dict[str, float]:
    """MDE at 80% power from the observed paired spread, and the seeds the predicted gap would need."""
    p = res.paired.get(arm, {}).get("entropy_all")
    if p is None:
        return {}
    clean = [d for d in p.diffs if not math.isnan(d)]
    sd = statistics.stdev(clean) if len(clean) > 1 else math.nan
    gap = expected_gap(res, name, arm)
    return {
        "sd": sd,
        "mde80": p.mde80,
        "n_seeds": len(clean),
        "expected_gap": gap,
        "seeds_needed": seeds_needed(gap, sd),
    }

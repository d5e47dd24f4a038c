"""PNG plots of the bench report (matplotlib, Agg backend): one figure per question.

Each arm gets one colour: its seed-mean curve (trailing moving average over `WINDOW` steps, stated in
every axis label) drawn solid, each seed thin. The branch point is a dotted vertical line. Held-out
results are points with CIs (never joined by a line across evaluations). The builders return the
`Figure` so tests can read the plotted data back. matplotlib is imported on first use (`_pyplot`),
so `stare --help` does not pay for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from training.bench.analysis import ENTROPY_ALL, ENTROPY_GATE, Results
from training.bench.runs import Run

if TYPE_CHECKING:
    from matplotlib.figure import Figure

WINDOW = 10
"""Trailing moving-average window (steps) of every training curve."""


def _pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def moving_average(xs: Sequence[float], window: int) -> list[float]:
    """Trailing moving average: y_t = mean(x_{max(0, t−w+1)..t})."""
    out, acc = [], 0.0
    for t, x in enumerate(xs):
        acc += x
        if t >= window:
            acc -= xs[t - window]
        out.append(acc / min(t + 1, window))
    return out


def _arms(runs: Sequence[Run]) -> dict[str, list[Run]]:
    out: dict[str, list[Run]] = {}
    for run in runs:
        out.setdefault(run.arm, []).append(run)
    return out


def seed_mean_curve(runs: Sequence[Run], key: str, window: int) -> tuple[list[int], list[float]]:
    """Steps logged by every run, and the mean over runs of the smoothed `key` at those steps."""
    smoothed = [dict(zip(r.steps_of(key), moving_average(r.series(key), window), strict=True)) for r in runs]
    common = sorted(set.intersection(*(set(s) for s in smoothed))) if smoothed else []
    return common, [sum(s[t] for s in smoothed) / len(smoothed) for t in common]


def plot_metric(
    runs: Sequence[Run],
    key: str,
    *,
    ylabel: str,
    title: str,
    branch: int = 0,
    ax: Any = None,
    style: str = "-",
) -> Figure:
    """Per-arm seed-mean of `key` (thick) over per-seed curves (thin), smoothed over `WINDOW` steps."""
    fig = ax.figure if ax is not None else _pyplot().figure(figsize=(7, 4))
    ax = ax if ax is not None else fig.add_subplot()
    for i, (arm, arm_runs) in enumerate(_arms(runs).items()):
        for run in arm_runs:
            ax.plot(
                run.steps_of(key),
                moving_average(run.series(key), WINDOW),
                style,
                color=f"C{i}",
                alpha=0.25,
                linewidth=0.8,
            )
        steps, mean = seed_mean_curve(arm_runs, key, WINDOW)
        ax.plot(steps, mean, style, color=f"C{i}", linewidth=2, label=f"{arm} (mean of {len(arm_runs)})")
    if branch:
        ax.axvline(branch, color="grey", linestyle=":", linewidth=1)
    ax.set(xlabel="training step", ylabel=f"{ylabel} ({WINDOW}-step mean)", title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def entropy_figure(runs: Sequence[Run], res: Results) -> Figure:
    """Left: all-episode entropy; right: the gate's H̄ (kept groups); both with the H_tgt band."""
    fig, axes = _panels(
        runs,
        res,
        [
            (
                ENTROPY_ALL,
                "all-episode entropy (nats)",
                "training entropy over ALL episodes (train/entropy_all)",
            ),
            (ENTROPY_GATE, "gate H̄ (nats)", "the gate's H̄: kept groups only (train/entropy)"),
        ],
        sharey=True,
    )
    if res.target:
        for ax in axes:
            ax.axhspan(res.target * (1 - res.band), res.target * (1 + res.band), color="grey", alpha=0.12)
            ax.axhline(res.target, color="grey", linestyle="--", linewidth=1, label="H_tgt")
    fig.tight_layout()
    return fig


def gate_raster(res: Results) -> Figure | None:
    """One row per seed of each gated arm: black where the gate was on (steps after the branch)."""
    rows = [(arm, i, bits) for arm, seeds in res.gated.items() for i, bits in enumerate(seeds)]
    if not rows:
        return None
    fig = _pyplot().figure(figsize=(7, 0.4 * len(rows) + 1))
    ax = fig.add_subplot()
    image = [[int(b) for b in bits] for _, _, bits in rows]
    width = max(len(r) for r in image)
    ax.imshow(
        [r + [0] * (width - len(r)) for r in image],
        aspect="auto",
        cmap="Greys",
        vmin=0,
        vmax=1,
        extent=(res.branch_step + 0.5, res.branch_step + width + 0.5, len(rows) - 0.5, -0.5),
    )
    ax.set_yticks(range(len(rows)), [f"{arm} s{res.seeds[i]}" for arm, i, _ in rows])
    ax.set(xlabel="training step", title="STARE gate per step (black = on), after the branch point")
    fig.tight_layout()
    return fig


def heldout_figure(res: Results) -> Figure | None:
    """Unbiased pass@k, k = 1..n, per arm and sampling setting: points with 95% CI over seeds."""
    if not res.heldout:
        return None
    fig, axes = _pyplot().subplots(1, len(res.heldout), figsize=(6 * len(res.heldout), 4), squeeze=False)
    for ax, (setting, by_arm) in zip(axes[0], res.heldout.items(), strict=True):
        for i, (arm, agg) in enumerate(by_arm.items()):
            ks = [k + 1 + 0.08 * (i - 0.5) for k in range(agg["n"])]
            means = [e.mean for e in agg["curve"]]
            err = [
                [e.mean - e.lo if e.n > 1 else 0 for e in agg["curve"]],
                [e.hi - e.mean if e.n > 1 else 0 for e in agg["curve"]],
            ]
            ax.errorbar(ks, means, yerr=err, fmt="o", color=f"C{i}", capsize=2, label=arm)
        ax.set(xlabel="k", ylabel="held-out pass@k (unbiased)", title=f"held-out, T=1, {setting}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def push_figure(res: Results) -> Figure | None:
    """Per-update probe entropy change of each counterfactual (mean, 95% block-bootstrap CI)."""
    if not res.push:
        return None
    fig = _pyplot().figure(figsize=(7, 4))
    ax = fig.add_subplot()
    names = list(res.push)
    for i, name in enumerate(names):
        e = res.push[name]
        ax.errorbar(
            [i],
            [e.mean],
            yerr=[[e.mean - e.lo], [e.hi - e.mean]] if e.lo == e.lo else None,
            fmt="o",
            capsize=3,
        )
    ax.axhline(0, color="grey", linewidth=1)
    ax.set_xticks(range(len(names)), names, rotation=20)
    ax.set(
        ylabel="ΔH on the probe per update (nats)",
        title="counterfactual push: one update from the same state",
    )
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def write_plots(out_dir: Path, runs: Sequence[Run], res: Results) -> list[tuple[str, str]]:
    """Write every figure as PNG; returns (file name, caption) pairs in report order."""
    figures: list[tuple[str, Figure | None, str]] = [
        (
            "entropy.png",
            entropy_figure(runs, res),
            "Training entropy: left over all episodes, right the gate's H̄ (kept groups); band = H_tgt ± δ; "
            "dotted line = branch point",
        ),
        (
            "accuracy.png",
            plot_metric(
                runs,
                "train/acc",
                ylabel="training accuracy",
                branch=res.branch_step,
                title="TRAINING accuracy (sampled episodes, T=1)",
            ),
            "Training accuracy",
        ),
        ("behaviour.png", _behaviour(runs, res), "Tool calls and response length per episode (training)"),
        ("gate.png", gate_raster(res), "Gate raster per seed (arms with a gate only)"),
        (
            "heldout.png",
            heldout_figure(res),
            "HELD-OUT pass@k at the end of training (points, 95% CI over seeds)",
        ),
        ("push.png", push_figure(res), "Counterfactual push per update on the fixed probe"),
    ]
    out = []
    for name, fig, caption in figures:
        if fig is None:
            continue
        fig.savefig(Path(out_dir) / name, dpi=110)
        _pyplot().close(fig)
        out.append((name, caption))
    return out


def _behaviour(runs: Sequence[Run], res: Results) -> Figure:
    fig, _ = _panels(
        runs,
        res,
        [
            ("train/tool_calls", "tool calls", "tool calls per episode"),
            ("train/response_length", "sampled tokens", "response length"),
        ],
    )
    fig.tight_layout()
    return fig


def _panels(
    runs: Sequence[Run], res: Results, panels: Sequence[tuple[str, str, str]], *, sharey: bool = False
) -> tuple[Figure, Any]:
    """One figure with a `plot_metric` panel per (key, ylabel, title), side by side; (figure, axes)."""
    fig, axes = _pyplot().subplots(1, len(panels), figsize=(6 * len(panels), 4), sharey=sharey)
    for ax, (key, ylabel, title) in zip(axes, panels, strict=True):
        plot_metric(runs, key, ylabel=ylabel, title=title, branch=res.branch_step, ax=ax)
    return fig, axes

"""PNG plots of the bench report (matplotlib, Agg backend): one figure per question.

Each arm gets one colour: its seed-mean curve (trailing moving average) drawn solid, each seed drawn
thin. The builders return the `Figure` so tests can read the plotted data back.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
from matplotlib.figure import Figure  # noqa: E402

from training.report import Run, moving_average  # noqa: E402


def _arms(runs: Sequence[Run]) -> dict[str, list[Run]]:
    out: dict[str, list[Run]] = {}
    for run in runs:
        out.setdefault(run.arm, []).append(run)
    return out


def _steps_and_values(run: Run, key: str) -> tuple[list[int], list[float]]:
    pairs = [(int(r["step"]), float(r[key])) for r in run.metrics if r.get(key) is not None]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def seed_mean_curve(runs: Sequence[Run], key: str, window: int) -> tuple[list[int], list[float]]:
    """Steps logged by every run, and the mean over runs of the smoothed `key` at those steps."""
    smoothed = []
    for run in runs:
        steps, vals = _steps_and_values(run, key)
        smoothed.append(dict(zip(steps, moving_average(vals, window), strict=False)))
    common = sorted(set.intersection(*(set(s) for s in smoothed))) if smoothed else []
    return common, [sum(s[t] for s in smoothed) / len(smoothed) for t in common]


def plot_metric(
    runs: Sequence[Run], key: str, *, ylabel: str, title: str, window: int = 10, ax: Any = None
) -> Figure:
    """Per-arm seed-mean of `key` (solid) over per-seed curves (thin), both smoothed over `window` steps."""
    fig = ax.figure if ax is not None else plt.figure(figsize=(7, 4))
    ax = ax if ax is not None else fig.add_subplot()
    for i, (arm, arm_runs) in enumerate(_arms(runs).items()):
        color = f"C{i}"
        for run in arm_runs:
            steps, vals = _steps_and_values(run, key)
            ax.plot(steps, moving_average(vals, window), color=color, alpha=0.25, linewidth=0.8)
        steps, mean = seed_mean_curve(arm_runs, key, window)
        ax.plot(steps, mean, color=color, linewidth=2, label=f"{arm} (mean of {len(arm_runs)})")
    ax.set(xlabel="training step", ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def plot_entropy(runs: Sequence[Run], *, target: float | None, band: float, window: int = 10) -> Figure:
    """Batch entropy per step, with H_tgt (dashed) and the band H_tgt·(1 ± band) shaded."""
    fig = plot_metric(
        runs,
        "train/entropy",
        ylabel="entropy (nats / sampled token)",
        title="Entropy with the target band",
        window=window,
    )
    ax = fig.axes[0]
    if target:
        ax.axhspan(target * (1 - band), target * (1 + band), color="grey", alpha=0.15, label="target band")
        ax.axhline(target, color="black", linestyle="--", linewidth=1, label=f"H_tgt = {target:.3f}")
        ax.legend(fontsize=8)
    return fig


def plot_accuracy(runs: Sequence[Run], *, window: int = 10) -> Figure:
    """Training accuracy per step (smoothed) and held-out avg@k at each evaluation (markers)."""
    fig = plot_metric(runs, "train/acc", ylabel="accuracy", title="Accuracy", window=window)
    ax = fig.axes[0]
    for i, (arm, arm_runs) in enumerate(_arms(runs).items()):
        points: dict[int, list[float]] = {}
        key = None
        for run in arm_runs:
            for record in run.evals:
                key = key or next((k for k in sorted(record) if "/avg@" in k), None)
                if key and record.get(key) is not None:
                    points.setdefault(int(record["step"]), []).append(float(record[key]))
        if points:
            steps = sorted(points)
            ax.plot(
                steps,
                [sum(points[s]) / len(points[s]) for s in steps],
                color=f"C{i}",
                linestyle=":",
                marker="o",
                label=f"{arm} {key[len('eval/') :]}",
            )
    ax.legend(fontsize=8)
    return fig


def plot_length(runs: Sequence[Run], *, window: int = 10) -> Figure:
    """Response length (tokens) and tool calls per episode, two panels sharing the step axis."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    plot_metric(
        runs,
        "train/response_length",
        ylabel="response tokens",
        title="Response length",
        window=window,
        ax=top,
    )
    plot_metric(
        runs, "train/tool_calls", ylabel="tool calls / episode", title="Tool calls", window=window, ax=bottom
    )
    return fig


def plot_gate(runs: Sequence[Run], *, window: int = 10) -> Figure:
    """Share of steps with the STARE gate on, as a moving average over `window` steps."""
    fig = plot_metric(
        runs, "stare/gate_on", ylabel=f"gate on ({window}-step mean)", title="Gate-on rate", window=window
    )
    fig.axes[0].set_ylim(-0.05, 1.05)
    return fig


def write_plots(out_dir: Path, runs: Sequence[Run], *, target: float | None, band: float) -> list[str]:
    """Save entropy.png, accuracy.png, length.png and gate.png into `out_dir`; returns the file names."""
    window = max(1, min(10, max(len(r.metrics) for r in runs) // 10))
    figures = {
        "entropy.png": plot_entropy(runs, target=target, band=band, window=window),
        "accuracy.png": plot_accuracy(runs, window=window),
        "length.png": plot_length(runs, window=window),
        "gate.png": plot_gate(runs, window=window),
    }
    for name, fig in figures.items():
        fig.tight_layout()
        fig.savefig(out_dir / name, dpi=100)
        plt.close(fig)
    return list(figures)

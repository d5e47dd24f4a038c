"""What one `stare bench` runs: `BenchPlan`, the bench's budget overrides and the CLI parsers.

The design (docs/bench.md): per seed one trunk of the baseline arm for the first `branch_frac` of
the steps, then every arm continues from the trunk's checkpoint; the target entropy is fixed from
the trunks before any branch starts; a counterfactual probe every `probe_every` steps of the
baseline's trajectory; a per-puzzle held-out evaluation at the end of each branch.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import stare

BENCH_DEFAULTS: dict[str, tuple[str, ...]] = {
    "cpu-tiny": (
        "eval.every=0",  # the bench's own held-out evaluation (per puzzle, two top-p) replaces the trainer's
        "eval.at_start=false",
        "eval.at_end=false",
        "log.save_every=0",
        "log.save_model=false",
        "log.tensorboard=false",
    ),
}
"""Overrides `stare bench` applies to a preset before the user's own (`--no-defaults` skips them).

The RL settings themselves (batch, refill rounds, lr, steps) live in the preset's YAML, so
`stare train configs/cpu-tiny.yaml algo=dapo` trains exactly what the bench trains.
"""


@dataclass(frozen=True, kw_only=True)
class BenchPlan:
    """What one `stare bench` invocation runs."""

    config: str = "cpu-tiny"
    """YAML preset (name in configs/ or a path) every arm starts from."""
    arms: tuple[str, ...] = ("dapo", "stare-o1")
    """Algorithm presets (`stare algo list`); the first is the baseline: it plays the trunks."""
    seeds: tuple[int, ...] = (0, 1, 2, 3)
    """Seeds; each arm runs every seed (same tasks, sampling seed, warm start and trunk)."""
    name: str = ""
    """Bench name: runs go to <run_dir>/<name>/<arm>-s<seed>/ (empty = bench-<config>-<time>)."""
    run_dir: str = "runs"
    """Parent directory of bench directories."""
    overrides: tuple[str, ...] = ()
    """Extra `key=value` config overrides applied to every run (e.g. train.steps=60)."""
    workers: int = 2
    """Runs in parallel (processes)."""
    threads: int = 1
    """torch threads per worker (workers × threads ≈ cores)."""
    cache_dir: str = ".cache/stare"
    """Where the preset's warm start is built and cached (repo-local, git-ignored)."""
    band: float = 0.2
    """Relative half-width of the target-entropy band in the report."""
    branch_frac: float = 0.3
    """The trunk covers the first round(branch_frac × steps) steps (0 = no trunk: every arm from step 1)."""
    target_window: int = 5
    """H_tgt = mean over seeds of the trunks' all-episode entropy over their last this-many steps."""
    target: float | None = None
    """A fixed H_tgt instead of the trunk rule (needed when branch_frac is 0 and the preset says auto)."""
    probe_every: int = 4
    """Counterfactual probe every this many steps of the baseline's trajectory (0 = off)."""
    probe_ws: tuple[float, ...] = (1.1, 2.0, 5.0)
    """STARE-O1 weights of the counterfactual dose-response."""
    probe_puzzles: int = 32
    """Held-out puzzles of the fixed probe (first N of the eval set), `probe_samples` episodes each."""
    probe_samples: int = 4
    heldout_limit: int = 256
    """Held-out puzzles of the final evaluation (first N of the eval set)."""
    heldout_n: int = 8
    """Samples per held-out puzzle (pass@k for k = 1..n)."""
    heldout_top_ps: tuple[float, ...] = (1.0, 0.7)
    """Held-out sampling settings at T = 1: top-p 1 (exploration) and 0.7 (the paper's protocol)."""
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
        if not 0.0 <= self.branch_frac < 1.0:
            raise ValueError(f"bench branch_frac must be in [0, 1), got {self.branch_frac}")
        if self.branch_frac == 0 and self.target is None:
            raise ValueError("bench without a trunk (branch_frac=0) needs a fixed target (--target 0.3)")
        if self.heldout_n < 1 or self.probe_every < 0 or self.target_window < 1:
            raise ValueError(
                "bench needs heldout_n >= 1, probe_every >= 0 and target_window >= 1, got "
                f"{self.heldout_n}, {self.probe_every}, {self.target_window}"
            )

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

    def branch_step(self, steps: int) -> int:
        """Last step of the trunk: round(branch_frac × steps), at least 1 when there is a trunk."""
        return 0 if self.branch_frac == 0 else max(1, min(steps - 1, round(self.branch_frac * steps)))


def run_overrides(plan: BenchPlan, bench_dir: Path, algo: str, seed: int, name: str) -> list[str]:
    """The config overrides of one run (the plan's overrides first; the run's identity last)."""
    return [
        f"model.cache_dir={plan.cache_dir}",
        *plan.all_overrides,
        f"algo={algo}",
        f"seed={seed}",
        f"log.run_dir={bench_dir}",
        f"log.name={name}",
        "log.progress=false",
        f"train.num_threads={plan.threads}",
        "log.overwrite=true",
    ]


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
    arms = tuple(a.strip() for a in (text.split(",") if isinstance(text, str) else text) if a.strip())
    unknown = [a for a in arms if a not in stare.PRESETS]
    if unknown:
        raise ValueError(f"--arms: unknown algorithm preset(s) {unknown}; choose from {list(stare.PRESETS)}")
    return arms

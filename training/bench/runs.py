"""Reading bench runs: `Run` (one arm × seed directory) from metrics.jsonl, eval.jsonl and heldout.json."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from training.bench.heldout import read_heldout
from training.jsonl import jsonl_lines


@dataclass
class Run:
    """One training run: its arm (algorithm preset), seed and logged records."""

    arm: str
    seed: int
    path: Path
    metrics: list[dict[str, Any]] = field(default_factory=list)
    """One record per training step (metrics.jsonl; a branch holds its trunk's steps first)."""
    evals: list[dict[str, Any]] = field(default_factory=list)
    """One record per trainer evaluation (eval.jsonl)."""
    heldout: dict[str, Any] | None = None
    """The bench's per-puzzle held-out record (heldout.json), when present."""
    wall_time_s: float | None = None
    """Wall time of the run when the bench recorded it."""

    def series(self, key: str) -> list[float]:
        """Values of `key` over steps, skipping records without it."""
        return [float(r[key]) for r in self.metrics if r.get(key) is not None]

    def steps_of(self, key: str) -> list[int]:
        """Steps of the records that hold `key` (aligned with `series(key)`)."""
        return [int(r["step"]) for r in self.metrics if r.get(key) is not None]

    def by_step(self, key: str) -> dict[int, float]:
        """{step: value of `key`}."""
        return dict(zip(self.steps_of(key), self.series(key), strict=True))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Records of a JSONL file (blank lines skipped); a missing file gives [].

    Raises:
        ValueError: A line is not a JSON object; the message names the file and line.
    """
    if not path.exists():
        return []
    out = []
    for n, record in jsonl_lines(path):
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
        heldout=read_heldout(path),
    )
    if not run.metrics:
        raise ValueError(f"{path}: no metrics.jsonl records; is this a training run directory?")
    return run


def load_bench_runs(bench_dir: Path, record: dict[str, Any]) -> list[Run]:
    """The arm runs of a bench directory (trunks excluded).

    From bench.json's `runs` when present, else every subdirectory `<arm>-s<seed>` with metrics.jsonl.
    """
    if record.get("runs"):
        runs = []
        for r in record["runs"]:
            if r.get("kind", "branch") != "branch":
                continue
            run = load_run(bench_dir / Path(r["dir"]).name, arm=r["arm"], seed=int(r["seed"]))
            run.wall_time_s = r.get("wall_time_s")
            runs.append(run)
        return runs
    runs = [
        load_run(p)
        for p in sorted(bench_dir.iterdir())
        if (p / "metrics.jsonl").exists() and not p.name.startswith("trunk-")
    ]
    if not runs:
        raise ValueError(f"{bench_dir}: no bench.json and no <arm>-s<seed>/metrics.jsonl runs inside")
    return runs

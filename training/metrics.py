"""Metrics sinks (JSONL, TensorBoard, a rich progress bar with ETA) and episode statistics.

Metric names are a contract (the bench report reads them); see docs/training.md for the list.
`metrics.jsonl` holds one record per training step, `eval.jsonl` one per evaluation.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from agents.trajectory import Trajectory
from training import distributed
from training.sampling import Collected

REFLECTION_WORDS: tuple[str, ...] = ("wait", "however", "verify", "check", "but", "alternatively", "hmm",
                                     "actually", "recheck", "mistake")
"""Words counted per response as `train/reflection_words` (case-insensitive, whole words)."""
_REFLECTION_RE = re.compile(r"\b(" + "|".join(REFLECTION_WORDS) + r")\b", re.IGNORECASE)


def reflection_count(text: str) -> int:
    """Number of reflection words in `text` (whole words, case-insensitive)."""
    return len(_REFLECTION_RE.findall(text))


def assistant_text(traj: Trajectory) -> str:
    """The assistant's own turns of an episode, joined (tool output excluded)."""
    return "\n".join(str(m.get("content") or "") for m in traj.messages if m.get("role") == "assistant")


def episode_metrics(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """Means over episodes: reward, accuracy, lengths, turns, tool calls/errors, reflection words.

    `train/response_length` counts sampled (loss-mask) tokens; `train/acc` is the share graded correct
    (`Trajectory.is_correct`); `train/turns` is assistant turns per episode, `train/samples` training
    rows per episode (1 append-only, one per turn for a per-turn episode) and `train/per_turn` the
    share of episodes trained as per-turn samples (a history-rewriting chat template).
    """
    if not trajs:
        return {}
    n = len(trajs)
    acc = [float(t.is_correct) for t in trajs]
    out = {
        "train/reward": sum(t.reward for t in trajs) / n,
        "train/acc": sum(acc) / n,
        "train/response_length": sum(t.sampled_tokens for t in trajs) / n,
        "train/total_length": sum(t.response_length for t in trajs) / n,
        "train/turns": sum(t.num_turns for t in trajs) / n,
        "train/samples": sum(len(t.rows()) for t in trajs) / n,
        "train/per_turn": sum(t.per_turn for t in trajs) / n,
        "train/tool_calls": sum(float(t.metrics.get("tool_calls", 0)) for t in trajs) / n,
        "train/tool_errors": sum(float(t.metrics.get("tool_errors", 0)) for t in trajs) / n,
        "train/reflection_words": sum(reflection_count(assistant_text(t)) for t in trajs) / n,
        "train/truncated": sum(t.finish_reason in ("length", "max_turns") for t in trajs) / n,
        "train/failed": sum(bool(t.failed) for t in trajs) / n,
        "train/prompt_truncated": sum(float(t.metrics.get("prompt_truncated", 0)) for t in trajs) / n,
    }
    return out


def global_episode_metrics(trajs: list[Trajectory]) -> dict[str, float]:
    """`episode_metrics` over every process's episodes: Σ_r n_r · mean_r / Σ_r n_r per key."""
    parts = distributed.gather_objects((len(trajs), episode_metrics(trajs)))
    total = sum(n for n, _ in parts)
    keys = dict.fromkeys(key for _, means in parts for key in means)
    return {key: sum(n * means.get(key, 0.0) for n, means in parts) / total for key in keys} if total else {}


def step_record(step: int, collected: Collected, learned: Mapping[str, float], *, lr: float,
                seconds: Mapping[str, float]) -> dict[str, Any]:
    """The metrics record of one training step (collective: every process calls it).

    Args:
        step: the training step.
        collected: the rollout stage's output (episodes, rounds, timings).
        learned: entropy gate, diagnostics, update and controller metrics.
        lr: the learning rate the step trained with.
        seconds: `old_logprob`, `update` and `step` wall times, and `time` (run time so far).
    """
    step_s = seconds["step"]
    local = [len(collected.all), sum(len(t.rows()) for t in collected.all),
             sum(t.sampled_tokens for t in collected.all)]
    episodes, rows, sampled = (int(x) for x in distributed.all_sum(torch.tensor(local)))
    return {"step": step, **global_episode_metrics(collected.all), **learned,
            "train/episodes": episodes, "train/rows": rows,
            "train/groups_kept": collected.groups_kept, "train/gen_rounds": collected.rounds,
            "train/dropped_failed": collected.dropped_failed, "actor/lr": lr,
            "time/rollout_s": collected.rollout_s, "time/generation_s": collected.generation_s,
            "time/tools_s": collected.tool_s, "time/render_s": collected.render_s,
            "time/reset_s": collected.reset_s, "time/prefetch_s": collected.prefetch_s,
            "time/old_logprob_s": seconds["old_logprob"], "time/update_s": seconds["update"],
            "time/step_s": step_s, "perf/tokens_per_s": sampled / step_s if step_s > 0 else 0.0,
            "time": seconds["time"]}


class SilentLogger:
    """The metrics sink of processes other than 0 (they compute, process 0 writes)."""

    def log(self, record: dict[str, Any], *, kind: str = "metrics") -> None:
        """Drop the record."""

    def close(self) -> None:
        """Nothing to close."""


class MetricsLogger:
    """Writes step records to JSONL (+ TensorBoard) and drives a rich progress bar.

    Args:
        run_dir: the run directory; files go to metrics.jsonl, eval.jsonl and tb/.
        total_steps: for the progress bar's ETA.
        tensorboard: write TensorBoard event files.
        progress: show the progress bar.
        start_step: first step of this process (after a resume), for the bar.
    """

    def __init__(self, run_dir: Path, *, total_steps: int, tensorboard: bool = True, progress: bool = True,
                 start_step: int = 0) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._truncate_after(start_step)
        self._files = {name: open(self.run_dir / f"{name}.jsonl", "a") for name in ("metrics", "eval")}
        self._tb = _summary_writer(self.run_dir / "tb") if tensorboard else None
        self._progress = _Progress(total_steps, start_step) if progress else None

    def _truncate_after(self, step: int) -> None:
        """Drop records of steps > `step` (left by a run that died after its last checkpoint)."""
        for name in ("metrics", "eval"):
            path = self.run_dir / f"{name}.jsonl"
            if path.exists():
                lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
                kept = [ln for ln in lines if json.loads(ln).get("step", 0) <= step]
                if len(kept) != len(lines):
                    path.write_text("".join(ln + "\n" for ln in kept))

    def log(self, record: Mapping[str, Any], *, kind: str = "metrics") -> None:
        """Append one record (must hold `step`) to <kind>.jsonl and TensorBoard."""
        clean = {k: _plain(v) for k, v in record.items()}
        self._files[kind].write(json.dumps(clean, allow_nan=True) + "\n")
        self._files[kind].flush()
        if self._tb is not None:
            for key, value in clean.items():
                if key != "step" and isinstance(value, (int, float)) and math.isfinite(value):
                    self._tb.add_scalar(key, value, clean["step"])
        if self._progress is not None and kind == "metrics":
            self._progress.advance(clean)

    def close(self) -> None:
        """Flush and close every sink."""
        for handle in self._files.values():
            handle.close()
        if self._tb is not None:
            self._tb.close()
        if self._progress is not None:
            self._progress.stop()


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, bool):
        return float(value)
    return value


def _summary_writer(path: Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as err:   # tensorboard is a declared dependency; say what to do if it is missing
        raise ImportError("log.tensorboard=true needs the `tensorboard` package: pip install tensorboard, "
                          "or set log.tensorboard=false") from err
    return SummaryWriter(log_dir=str(path))


class _Progress:
    """A rich progress bar: step, ETA, reward, accuracy, entropy, gate."""

    def __init__(self, total: int, start: int) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        self._bar = Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(),
                             TimeElapsedColumn(),
                             TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[info]}"),
                             transient=False)
        self._task = self._bar.add_task("train", total=total, completed=start, info="")
        self._bar.start()

    def advance(self, record: Mapping[str, Any]) -> None:
        info = "  ".join(f"{label} {record[key]:.3f}" for label, key in
                         (("acc", "train/acc"), ("H", "train/entropy"), ("gate", "stare/gate_on"))
                         if isinstance(record.get(key), (int, float)))
        self._bar.update(self._task, completed=record["step"], info=info)

    def stop(self) -> None:
        self._bar.stop()

"""Atomic checkpoints: model, optimizer, scheduler, RNG states (accelerate), controller, data cursor, step.

Layout: <run>/checkpoints/step_000006/ holds accelerate's state (model, optimizer, scheduler, the
python/numpy/torch RNG states of every process) plus `trainer_state.json` (step, controller, data
cursor, elapsed time). It is written to a hidden temporary directory first and renamed into place
with `os.replace`, so a crash never leaves a half-written checkpoint under a `step_*` name.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_STEP_DIR = re.compile(r"^step_(\d+)$")


def checkpoint_dir(run_dir: Path) -> Path:
    """<run>/checkpoints."""
    return Path(run_dir) / "checkpoints"


def list_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints of a run as (step, path), oldest first."""
    root = checkpoint_dir(run_dir)
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _STEP_DIR.match(child.name)
        if match and (child / "trainer_state.json").is_file():
            found.append((int(match.group(1)), child))
    return sorted(found)


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint, or None."""
    found = list_checkpoints(run_dir)
    return found[-1][1] if found else None


def save_checkpoint(run_dir: Path, step: int, accelerator: Any, trainer_state: dict[str, Any], *,
                    keep: int = 1) -> Path:
    """Write a checkpoint atomically and prune old ones.

    Args:
        run_dir: the run directory.
        step: the last completed training step.
        accelerator: saves model, optimizer, scheduler and RNG states (`save_state`).
        trainer_state: JSON-able state of the loop (controller, data cursor, step, ...).
        keep: checkpoints to keep (>= 1).

    Returns:
        The final checkpoint directory.
    """
    root = checkpoint_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:06d}"
    tmp = root / f".tmp-step_{step:06d}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    accelerator.wait_for_everyone()
    with _quiet("accelerate.utils.other"):   # "Removed shared tensor lm_head.weight": tied, restored on load
        accelerator.save_state(str(tmp), safe_serialization=True)
    if accelerator.is_main_process:
        (tmp / "trainer_state.json").write_text(json.dumps({**trainer_state, "step": step}, indent=1))
        if final.exists():   # a re-save of the same step: move the old copy aside first
            stale = root / f".old-step_{step:06d}-{os.getpid()}"
            os.replace(final, stale)
            shutil.rmtree(stale)
        os.replace(tmp, final)
        for _, old in list_checkpoints(run_dir)[:-max(1, keep)]:
            shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


@contextlib.contextmanager
def _quiet(logger_name: str) -> Iterator[None]:
    logger = logging.getLogger(logger_name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def load_checkpoint(path: Path, accelerator: Any) -> dict[str, Any]:
    """Restore model, optimizer, scheduler and RNG states; return the trainer state (with `step`)."""
    path = Path(path)
    state_file = path / "trainer_state.json"
    if not state_file.is_file():
        raise FileNotFoundError(f"{path} is not a complete checkpoint (no trainer_state.json)")
    accelerator.load_state(str(path))
    return json.loads(state_file.read_text())

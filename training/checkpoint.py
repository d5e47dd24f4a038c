"""Atomic, validated checkpoints: model, optimizer, scheduler, RNG states, controller, data cursor.

Layout: <run>/checkpoints/step_000006/ holds accelerate's state (model, optimizer, scheduler, the
python/numpy/torch RNG states of every process), `trainer_state.json` (step, controller, data
cursor, elapsed time) and `manifest.json` (every file and its size). It is written to a hidden
temporary directory first and renamed into place with `os.replace`, so a crash never leaves a
half-written checkpoint under a `step_*` name.

Resume never loses and never pretends (`prepare_resume`, run once by the main process): stale
temporary directories are removed, torn log lines are repaired, the newest *complete* checkpoint is
chosen (every file present, of its recorded size and readable), newer damaged ones are moved aside
(never deleted) and log records of later steps are moved to a side file (never dropped).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import struct
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger(__name__)
_STEP_DIR = re.compile(r"^step_(\d+)$")
_TEMP_DIR = re.compile(r"^\.(tmp|old)-step_(\d+)-\d+$")
STATE_FILE = "trainer_state.json"
MANIFEST = "manifest.json"
LOGS = ("metrics.jsonl", "eval.jsonl")
"""The run's JSONL logs (one record per line, each with a `step`)."""


class CheckpointError(FileNotFoundError):
    """No usable checkpoint where one was expected; the message names the file and what is wrong."""


def checkpoint_dir(run_dir: Path) -> Path:
    """<run>/checkpoints."""
    return Path(run_dir) / "checkpoints"


def _step_dirs(run_dir: Path) -> list[tuple[int, Path]]:
    """Every `step_*` directory (complete or not) as (step, path), oldest first."""
    root = checkpoint_dir(run_dir)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), child) for child in root.iterdir() if (m := _STEP_DIR.match(child.name))]
    return sorted(found)


def list_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints of a run as (step, path), oldest first (see `checkpoint_problem`)."""
    return [(step, path) for step, path in _step_dirs(run_dir) if checkpoint_problem(path) is None]


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint, or None."""
    found = list_checkpoints(run_dir)
    return found[-1][1] if found else None


def checkpoint_problem(path: Path) -> str | None:
    """Why ``path`` is not a complete, readable checkpoint (naming the file), or None when it is."""
    path = Path(path)
    state = path / STATE_FILE
    if not state.is_file():
        return f"{state} is missing"
    try:
        step = json.loads(state.read_text()).get("step")
    except (OSError, ValueError, AttributeError) as err:
        return f"{state} is unreadable ({err})"
    if not isinstance(step, int):
        return f"{state} has no integer 'step'"
    manifest = path / MANIFEST
    if manifest.is_file():
        try:
            expected = json.loads(manifest.read_text())
        except (OSError, ValueError) as err:
            return f"{manifest} is unreadable ({err})"
        for name, size in expected.items():
            file = path / name
            if not file.is_file():
                return f"{file} is missing"
            if file.stat().st_size != size:
                return f"{file} is truncated or altered ({file.stat().st_size} of {size} bytes)"
    elif not any(path.glob("*.safetensors")) and not any(path.glob("pytorch_model*.bin")):
        return f"{path} holds no model weights (model.safetensors)"
    for file in sorted(path.iterdir()):
        problem = _file_problem(file)
        if problem:
            return f"{file} {problem}"
    return None


def _file_problem(file: Path) -> str | None:
    """A structural check by kind: safetensors header and length, torch zip archives, pickled RNG states."""
    try:
        if file.suffix == ".safetensors":
            return _safetensors_problem(file)
        if file.suffix == ".pkl":   # accelerate ignores an unreadable RNG state; an exact resume must not
            torch.load(file, map_location="cpu", weights_only=False)
        elif file.suffix == ".bin":
            with zipfile.ZipFile(file) as archive:   # torch.save's format; reads the central directory
                archive.namelist()
        elif file.suffix == ".json":
            json.loads(file.read_text())
    except Exception as err:  # noqa: BLE001 - any failure to read means the file is damaged
        return f"is unreadable ({type(err).__name__}: {str(err)[:200]})"
    return None


def _safetensors_problem(file: Path) -> str | None:
    """Check the header (8-byte length + JSON) and that the data reaches the last tensor's end."""
    size = file.stat().st_size
    with file.open("rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            return f"is truncated ({size} bytes)"
        (length,) = struct.unpack("<Q", head)
        if 8 + length > size:
            return f"is truncated (header says {length} bytes, file has {size})"
        header = json.loads(fh.read(length))
    end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    if 8 + length + end > size:
        return f"is truncated ({size} of {8 + length + end} bytes)"
    return None


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
    accelerator.wait_for_everyone()           # every process has written its RNG state
    if accelerator.is_main_process:
        (tmp / STATE_FILE).write_text(json.dumps({**trainer_state, "step": step}, indent=1))
        sizes = {p.name: p.stat().st_size for p in sorted(tmp.iterdir()) if p.is_file()}
        (tmp / MANIFEST).write_text(json.dumps(sizes, indent=1))
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
    """Restore model, optimizer, scheduler and RNG states; return the trainer state (with `step`).

    Raises:
        CheckpointError: the checkpoint is incomplete or a file is damaged (the message names it).
    """
    path = Path(path)
    problem = checkpoint_problem(path)
    if problem:
        raise CheckpointError(f"cannot resume from {path}: {problem}")
    try:
        accelerator.load_state(str(path))
    except Exception as err:
        raise CheckpointError(f"cannot resume from {path}: loading it failed ({type(err).__name__}: {err})") \
            from err
    return json.loads((path / STATE_FILE).read_text())


def prepare_resume(run_dir: Path) -> Path | None:
    """Make a run directory safe to resume; return the checkpoint to resume from (None: step 0).

    In order: restore a checkpoint a crash left only as `.old-step_*` (killed between the two renames
    of a re-save), remove the other stale temporary directories, drop torn lines from the logs
    (kept in `<log>.torn`), pick the newest complete checkpoint, move newer damaged ones to
    `checkpoints/damaged-step_*` and log records of later steps to `<log>.after-step_N` (nothing is
    deleted that a later step wrote). Every decision is logged with the file it concerns.

    Raises:
        CheckpointError: checkpoints exist but none is complete; names each one and what is wrong.
    """
    run_dir = Path(run_dir)
    _clean_temporaries(run_dir)
    for name in LOGS:
        repair_jsonl(run_dir / name)
    dirs = _step_dirs(run_dir)
    problems = {path: checkpoint_problem(path) for _, path in dirs}
    complete = [(step, path) for step, path in dirs if problems[path] is None]
    if dirs and not complete:
        listing = "; ".join(f"{path.name}: {problems[path]}" for _, path in dirs)
        raise CheckpointError(f"--resume: no complete checkpoint in {checkpoint_dir(run_dir)} ({listing}). "
                              "Repair or remove them, or start again with log.overwrite=true.")
    step, chosen = complete[-1] if complete else (0, None)
    for later, path in dirs:
        if later > step:
            aside = path.with_name(f"damaged-{path.name}-{int(time.time())}")
            os.replace(path, aside)
            log.warning("resume: skipped %s (%s); moved it to %s", path, problems[path], aside)
    for name in LOGS:
        _move_later_records(run_dir / name, step)
    log.warning("resume: %s", f"from {chosen} (step {step})" if chosen else
                f"no checkpoint in {checkpoint_dir(run_dir)}; starting at step 0")
    return chosen


def _clean_temporaries(run_dir: Path) -> None:
    root = checkpoint_dir(run_dir)
    if not root.is_dir():
        return
    for child in sorted(root.iterdir()):
        match = _TEMP_DIR.match(child.name)
        if not match:
            continue
        final = root / f"step_{match.group(2)}"
        if match.group(1) == "old" and not final.exists() and checkpoint_problem(child) is None:
            os.replace(child, final)
            log.warning("resume: restored %s from %s (a re-save was interrupted)", final, child)
        else:
            shutil.rmtree(child, ignore_errors=True)
            log.warning("resume: removed the stale temporary directory %s", child)


def repair_jsonl(path: Path) -> int:
    """Drop the lines of a JSONL log that do not parse (a torn write); keep them in `<path>.torn`.

    Returns:
        How many lines were dropped.
    """
    path = Path(path)
    if not path.is_file():
        return 0
    good, torn = [], []
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if isinstance(record, dict):
            good.append(line)
        else:
            torn.append((number, line))
    if torn:
        with path.with_name(path.name + ".torn").open("a") as fh:
            fh.writelines(line + "\n" for _, line in torn)
        _rewrite(path, good)
        log.warning("resume: dropped %d torn line(s) of %s (line %s); kept in %s.torn", len(torn), path,
                    ", ".join(str(n) for n, _ in torn), path.name)
    return len(torn)


def _move_later_records(path: Path, step: int) -> None:
    """Move records with `step` > ``step`` to `<path>.after-step_<step>` (the resumed run rewrites them)."""
    if not path.is_file():
        return
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    later = [line for line in lines if json.loads(line).get("step", 0) > step]
    if later:
        side = path.with_name(f"{path.name}.after-step_{step}")
        with side.open("a") as fh:
            fh.writelines(line + "\n" for line in later)
        _rewrite(path, [line for line in lines if json.loads(line).get("step", 0) <= step])
        log.warning("resume: moved %d record(s) of steps > %d from %s to %s", len(later), step, path, side)


def _rewrite(path: Path, lines: list[str]) -> None:
    """Replace a file's lines atomically."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(line + "\n" for line in lines))
    os.replace(tmp, path)

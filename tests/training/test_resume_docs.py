"""docs/training.md describes resume as `training.checkpoint.prepare_resume` does it: every name the
resume leaves in a crashed run directory is the one the docs tell the user to look for."""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from safetensors.torch import save_file

from training.checkpoint import MANIFEST, STATE_FILE, prepare_resume

DOC = Path(__file__).resolve().parents[2] / "docs" / "training.md"


def _checkpoint(root: Path, step: int, *, complete: bool) -> None:
    path = root / f"step_{step:06d}"
    path.mkdir(parents=True)
    save_file({"w": torch.zeros(2)}, str(path / "model.safetensors"))
    if complete:
        (path / STATE_FILE).write_text(json.dumps({"step": step}))
        sizes = {p.name: p.stat().st_size for p in sorted(path.iterdir())}
        (path / MANIFEST).write_text(json.dumps(sizes))


def _crashed_run(run: Path) -> None:
    """Step 1 complete, step 2 without trainer_state.json, a stale save of step 3, a torn log line."""
    ckpts = run / "checkpoints"
    _checkpoint(ckpts, 1, complete=True)
    _checkpoint(ckpts, 2, complete=False)
    (ckpts / ".tmp-step_000003-4242").mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "rew')


def _resume_section() -> str:
    text = DOC.read_text()
    start = text.index("### What `--resume` does to the run directory")
    return text[start:text.index("\n## ", start)]


def test_the_names_resume_leaves_are_the_ones_the_docs_give(tmp_path):
    run = tmp_path / "run"
    _crashed_run(run)
    assert prepare_resume(run) == run / "checkpoints" / "step_000001"
    left = sorted(p.name for p in [*run.iterdir(), *(run / "checkpoints").iterdir()])
    assert [re.sub(r"-\d+$", "", name) for name in left] == [
        "checkpoints", "damaged-step_000002", "metrics.jsonl", "metrics.jsonl.after-step_1",
        "metrics.jsonl.torn", "step_000001"]
    section = _resume_section()
    for named in ("damaged-step_N-<unix time>", "metrics.jsonl.torn", "metrics.jsonl.after-step_N",
                  ".tmp-step_", ".old-step_", MANIFEST, STATE_FILE, "CheckpointError", "log.overwrite=true"):
        assert named in section, named

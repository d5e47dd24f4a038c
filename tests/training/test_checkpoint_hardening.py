"""Hostile probes, class 5: checkpoints never lose, never pretend.

A crashed trainer leaves a newest checkpoint without `trainer_state.json`, a torn last line in
`metrics.jsonl`, `.tmp-step_*` directories, a truncated `model.safetensors` or a corrupt RNG state.
Resume must use the newest *complete* checkpoint, say why it skipped others, delete nothing a
later step wrote, and name the file in every error.
"""

from __future__ import annotations

import json
import logging

import pytest
import torch
from accelerate import Accelerator

from training.checkpoint import load_checkpoint, save_checkpoint


def _acc():
    torch.manual_seed(0)
    acc = Accelerator(cpu=True)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    acc.prepare(model, opt)
    return acc


def test_a_corrupt_rng_state_is_an_error_naming_the_file(tmp_path):
    acc = _acc()
    path = save_checkpoint(tmp_path, 1, acc, {"elapsed": 0.0})
    rng = path / "random_states_0.pkl"
    rng.write_bytes(b"not a pickle at all")
    with pytest.raises(FileNotFoundError, match=str(rng)):   # an exact resume is impossible: say so
        load_checkpoint(path, acc)


def test_a_truncated_model_file_is_an_error_naming_it(tmp_path):
    acc = _acc()
    path = save_checkpoint(tmp_path, 1, acc, {"elapsed": 0.0})
    weights = path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])
    with pytest.raises(FileNotFoundError, match=str(weights)):
        load_checkpoint(path, acc)


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture()
def crashed_run(make_cfg, run_training, tmp_path):
    """A 2-step run checkpointed at both steps, then 'crashed' mid-save of step 2."""
    common = ["log.save_every=1", "log.keep_checkpoints=2", "log.name=crashed"]
    run_training(make_cfg(*common, "train.steps=2"))
    run_dir = tmp_path / "runs" / "crashed"
    ckpts = run_dir / "checkpoints"
    (ckpts / "step_000002" / "trainer_state.json").unlink()       # killed before trainer_state.json
    (ckpts / ".tmp-step_000003-4242").mkdir()                      # kill -9 during a later save
    (ckpts / ".tmp-step_000003-4242" / "model.safetensors").write_bytes(b"partial")
    with (run_dir / "metrics.jsonl").open("a") as fh:
        fh.write('{"step": 3, "train/rew')                        # torn last line
    return common, run_dir


def test_resume_skips_the_damaged_newest_checkpoint_and_loses_nothing(crashed_run, make_cfg, run_training,
                                                                      caplog):
    common, run_dir = crashed_run
    ckpts = run_dir / "checkpoints"
    weights = (ckpts / "step_000002" / "model.safetensors").read_bytes()
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    step2_record = json.loads(lines[1])
    with caplog.at_level(logging.WARNING, logger="training.checkpoint"):
        summary = run_training(make_cfg(*common, "train.steps=2"), resume=True)
    assert summary["final"]["step"] == 2
    text = caplog.text
    assert "from " in text and "step_000001 (step 1)" in text and "trainer_state.json is missing" in text
    damaged = [p for p in ckpts.iterdir() if p.name.startswith("damaged-step_000002")]
    assert len(damaged) == 1 and (damaged[0] / "model.safetensors").read_bytes() == weights   # kept intact
    assert not any(p.name.startswith(".tmp-") for p in ckpts.iterdir())                      # stale tmp gone
    assert (run_dir / "metrics.jsonl.torn").read_text() == '{"step": 3, "train/rew\n'         # reported, kept
    assert _records(run_dir / "metrics.jsonl.after-step_1") == [step2_record]   # moved, not lost
    assert [r["step"] for r in _records(run_dir / "metrics.jsonl")] == [1, 2]


def test_resume_with_no_complete_checkpoint_refuses_instead_of_restarting(make_cfg, run_training, tmp_path):
    common = ["log.save_every=1", "log.name=only"]
    run_training(make_cfg(*common, "train.steps=1"))
    run_dir = tmp_path / "runs" / "only"
    (run_dir / "checkpoints" / "step_000001" / "trainer_state.json").unlink()
    before = (run_dir / "metrics.jsonl").read_text()
    with pytest.raises(FileNotFoundError, match="step_000001.*trainer_state.json is missing"):
        run_training(make_cfg(*common, "train.steps=2"), resume=True)
    assert (run_dir / "metrics.jsonl").read_text() == before
    assert (run_dir / "checkpoints" / "step_000001" / "model.safetensors").is_file()

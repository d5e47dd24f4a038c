"""Checkpoints are atomic (temp dir, then rename), complete, pruned, and restore everything."""

from __future__ import annotations

import json
import os

import pytest
import torch
from accelerate import Accelerator

from training.checkpoint import latest_checkpoint, list_checkpoints, load_checkpoint, save_checkpoint


def _prepared(seed=0):
    torch.manual_seed(seed)
    acc = Accelerator(cpu=True)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (s + 1))
    model, opt, sched = acc.prepare(model, opt, sched)
    return acc, model, opt, sched


def _train_one(model, opt, sched):
    model(torch.ones(4, 3)).pow(2).sum().backward()
    opt.step()
    opt.zero_grad()
    sched.step()


def test_save_then_load_restores_model_optimizer_scheduler_rng_and_state(tmp_path):
    acc, model, opt, sched = _prepared()
    _train_one(model, opt, sched)
    torch.manual_seed(123)
    path = save_checkpoint(tmp_path, 7, acc, {"controller": {"w": 1.2}, "elapsed": 3.5})
    expected_next = torch.rand(3)
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    _train_one(model, opt, sched)                      # move everything on
    state = load_checkpoint(path, acc)
    assert state == {"controller": {"w": 1.2}, "elapsed": 3.5, "step": 7}
    assert all(torch.equal(saved[k], v) for k, v in model.state_dict().items())
    assert opt.state_dict()["state"][0]["step"] == 1
    assert sched.scheduler.last_epoch == 1
    assert torch.equal(torch.rand(3), expected_next)   # torch RNG restored


def test_half_written_checkpoint_is_never_picked(tmp_path, monkeypatch):
    acc, model, opt, sched = _prepared()
    save_checkpoint(tmp_path, 1, acc, {"elapsed": 0.0})

    def crash(*args, **kwargs):
        raise RuntimeError("killed while writing")
    monkeypatch.setattr(acc, "save_state", lambda out, **kw: (os.makedirs(out), crash()))
    with pytest.raises(RuntimeError):
        save_checkpoint(tmp_path, 2, acc, {"elapsed": 1.0})
    assert [s for s, _ in list_checkpoints(tmp_path)] == [1]
    assert latest_checkpoint(tmp_path).name == "step_000001"
    assert any(p.name.startswith(".tmp-step_000002") for p in (tmp_path / "checkpoints").iterdir())


def test_old_checkpoints_are_pruned_and_resaving_a_step_replaces_it(tmp_path):
    acc, model, opt, sched = _prepared()
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, acc, {"elapsed": float(step)}, keep=2)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [2, 3]
    save_checkpoint(tmp_path, 3, acc, {"elapsed": 9.0}, keep=2)
    state = json.loads((latest_checkpoint(tmp_path) / "trainer_state.json").read_text())
    assert state["elapsed"] == 9.0
    assert not [p for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith(".")]


def test_loading_an_incomplete_dir_names_the_problem(tmp_path):
    acc, *_ = _prepared()
    (tmp_path / "x").mkdir()
    with pytest.raises(FileNotFoundError, match="trainer_state.json"):
        load_checkpoint(tmp_path / "x", acc)

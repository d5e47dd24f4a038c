"""Resume is exact: 6 steps straight == 3 steps, stop, resume for 3 (parameters equal bit for bit)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from training.checkpoint import latest_checkpoint


def _params(run_dir):
    path = latest_checkpoint(run_dir)
    return load_file(str(path / "model.safetensors"))


def _records(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("mini_batches", [1, 2], ids=["fused-on-policy", "two-mini-batches"])
def test_six_steps_equal_three_plus_three(make_cfg, run_training, tmp_path, mini_batches):
    common = ["algo=stare-o1", "algo.stare.target_entropy=100", f"train.mini_batches={mini_batches}",
              "eval.every=2",
              "optim.schedule=cosine", "optim.warmup_steps=2", "algo.stare.adaptive=true",
              "algo.stare.alpha=0.05"]
    run_training(make_cfg(*common, "train.steps=6", "log.name=straight"))
    run_training(make_cfg(*common, "train.steps=3", "log.name=resumed"))
    # the resumed run is given its full length; the schedule is defined over train.steps=6 in both
    resumed = run_training(make_cfg(*common, "train.steps=6", "log.name=resumed"), resume=True)
    a, b = _params(tmp_path / "runs" / "straight"), _params(tmp_path / "runs" / "resumed")
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    ra, rb = _records(tmp_path / "runs" / "straight"), _records(tmp_path / "runs" / "resumed")
    assert [r["step"] for r in rb] == [1, 2, 3, 4, 5, 6]
    # same episodes, rewards, entropies and controller state at every step
    for x, y in zip(ra, rb, strict=True):
        for key in ("train/reward", "train/entropy", "stare/reweight_w", "train/groups_kept",
                    "actor/grad_norm"):
            assert x.get(key) == y.get(key), (x["step"], key)
    assert resumed["final"]["step"] == 6
    assert any(r["train/groups_kept"] > 0 for r in ra)   # updates actually happened
    assert ra[-1]["stare/reweight_w"] != ra[0]["stare/reweight_w"]   # adaptive W moved and was restored

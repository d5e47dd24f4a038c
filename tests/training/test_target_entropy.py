"""`train.target_entropy=auto` on any model: H_tgt = factor × the entropy step 1 measures."""

import json

import pytest

from training import runtime
from training.trainer import train


def test_auto_target_entropy_is_measured_from_the_starting_policy(make_cfg, tiny_model_dir):
    assert not (tiny_model_dir / "warmstart.json").exists()     # not a preset build
    cfg = make_cfg("algo=grpo", "train.steps=1", "train.target_entropy=auto",
                   "train.target_entropy_factor=0.5")
    target = runtime.resolve_algo(cfg, tiny_model_dir).stare.target_entropy
    train(cfg)
    first = json.loads((cfg.run_path / "metrics.jsonl").read_text().splitlines()[0])
    assert target == pytest.approx(0.5 * first["train/entropy"], rel=1e-5)
    assert first["stare/target_entropy"] == pytest.approx(target)   # the run used it

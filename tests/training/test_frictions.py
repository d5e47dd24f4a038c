"""Newcomer frictions: a failed setup leaves no run directory; a model dir without a model says so."""

import pytest

from training.commands.train import evaluate_model
from training.config import load_config
from training.trainer import train


def test_a_failed_setup_leaves_no_empty_run_directory(tmp_path):
    empty = tmp_path / "not-a-model"
    empty.mkdir()
    cfg = load_config(None, [f"model.path={empty}", f"log.run_dir={tmp_path / 'runs'}", "log.progress=false"])
    with pytest.raises(FileNotFoundError, match="config.json"):
        train(cfg)
    assert not cfg.run_path.exists()


def test_eval_on_a_run_directory_without_a_model_names_what_is_missing(tmp_path):
    run = tmp_path / "runs" / "stare-o1-seed0"
    (run / "checkpoints").mkdir(parents=True)
    (run / "metrics.jsonl").write_text("")
    with pytest.raises(FileNotFoundError, match="config.json .* missing .*final model was not saved"):
        evaluate_model(load_config(None), run)

"""`stare train` / `stare eval` through the real CLI app (typer), on the tiny model."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from training.cli import app
from training.commands.train import _with_model
from training.config import load_config

from .conftest import FAST


@pytest.fixture()
def cli_args(tiny_model_dir, tmp_path):
    return [f"model.path={tiny_model_dir}", f"log.run_dir={tmp_path / 'runs'}", *FAST]


def test_train_then_resume_then_eval(cli_args, tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["train", "cpu-tiny", *cli_args, "algo=dapo", "train.steps=1",
                                 "train.target_entropy=0.5", "log.save_model=true"])
    assert result.exit_code == 0, result.output
    run_dir = tmp_path / "runs" / "dapo-seed0"
    assert json.loads(result.output[result.output.index("{"):])["run_dir"] == str(run_dir)
    result = runner.invoke(app, ["train", "cpu-tiny", *cli_args, "algo=dapo", "train.steps=2",
                                 "train.target_entropy=0.5", "log.save_model=true", "--resume"])
    assert result.exit_code == 0, result.output
    steps = [json.loads(x)["step"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]
    out = tmp_path / "eval.json"
    result = runner.invoke(app, ["eval", "cpu-tiny", *cli_args, "--model", str(run_dir), "--out", str(out)])
    assert result.exit_code == 0, result.output
    metrics = json.loads(out.read_text())
    assert set(metrics) >= {"eval/countdown-eval/avg@2", "eval/countdown-eval/pass@2"}

    # --baseline: same problems and seeds for both models, so a model against itself gains exactly 0,
    # and the model's own avg@k is what plain `stare eval` measured (one process, same seeding)
    def compare(baseline):
        path = tmp_path / "cmp.json"
        result = runner.invoke(app, ["eval", "cpu-tiny", *cli_args, "--model", str(run_dir),
                                     "--baseline", str(baseline), "--out", str(path)])
        assert result.exit_code == 0, result.output
        return json.loads(path.read_text())

    same = compare(run_dir)
    assert same["eval/countdown-eval/gain"] == same["eval/countdown-eval/gain_ci95_lo"] == 0.0
    assert same["eval/countdown-eval/avg@2"] == metrics["eval/countdown-eval/avg@2"]
    other = compare(cli_args[0].split("=", 1)[1])            # the untrained starting model
    assert other["eval/countdown-eval/avg@2"] == metrics["eval/countdown-eval/avg@2"]
    gain = other["eval/countdown-eval/avg@2"] - other["eval/countdown-eval/baseline_avg@2"]
    assert other["eval/countdown-eval/gain"] == pytest.approx(gain)


def test_a_baseline_may_be_a_preset_or_a_run_dir(tmp_path):
    cfg = load_config("cpu-tiny", [])
    assert _with_model(cfg, Path("preset:cpu-tiny")).model.path == "preset:cpu-tiny"   # the cached warm start
    run = tmp_path / "run"
    (run / "model").mkdir(parents=True)
    (run / "model" / "config.json").write_text("{}")
    assert _with_model(cfg, run).model.path == str(run / "model")
    assert _with_model(cfg, None) is cfg


def test_bad_override_exits_2_with_the_key_named(cli_args):
    result = CliRunner().invoke(app, ["train", "cpu-tiny", "rollout.gruop_size=4"])
    assert result.exit_code == 2
    assert "rollout.gruop_size" in result.output and "Did you mean 'rollout.group_size'" in result.output


def test_print_config(cli_args):
    result = CliRunner().invoke(app, ["train", "cpu-tiny", "algo=stare-c2", "--print-config"])
    assert result.exit_code == 0
    assert "preset: stare-c2" in result.output and "variant: C2" in result.output


@pytest.mark.slow
def test_cpu_preset_trains_a_few_steps(tmp_path):
    """The real CPU preset (builds or reuses the cached warm start: many minutes on the first run).

    STARE_CACHE_DIR points at an existing preset cache (default: the config's model.cache_dir).
    """
    cache_dir = os.environ.get("STARE_CACHE_DIR")
    cache = [f"model.cache_dir={cache_dir}"] if cache_dir else []
    result = CliRunner().invoke(app, ["train", "cpu-tiny", f"log.run_dir={tmp_path}", "train.steps=2",
                                      "rollout.prompts_per_step=4", "eval.limit=4", "eval.every=0",
                                      "log.progress=false", *cache])
    assert result.exit_code == 0, result.output
    lines = (tmp_path / "stare-o1-seed0" / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(x) for x in lines]
    assert len(records) == 2 and records[-1]["train/tool_calls"] > 0

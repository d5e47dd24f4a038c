"""Under torchrun / accelerate launch only process 0 prints the commands' output."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from training.commands.ranks import is_main_process


@pytest.mark.parametrize(("env", "main"), [
    ({}, True),                                    # a plain process
    ({"RANK": "0", "LOCAL_RANK": "0"}, True),
    ({"RANK": "1", "LOCAL_RANK": "1"}, False),
    ({"RANK": "2", "LOCAL_RANK": "0"}, False),     # node 1's first process: global rank decides
    ({"LOCAL_RANK": "1"}, False),                  # a launcher that sets only LOCAL_RANK
    ({"RANK": " ", "LOCAL_RANK": "0"}, True),
])
def test_main_process_from_the_launcher_environment(env, main):
    assert is_main_process(env) is main


def test_a_garbled_rank_names_the_variable():
    with pytest.raises(ValueError, match="RANK='x'"):
        is_main_process({"RANK": "x"})


def _app():
    import typer

    from training.commands.train import COMMANDS
    app = typer.Typer()
    for command in COMMANDS:
        app.command()(command)
    return app


@pytest.mark.parametrize(("rank", "prints"), [("0", True), ("1", False)])
def test_train_prints_only_on_process_0(monkeypatch, rank, prints):
    monkeypatch.setenv("RANK", rank)
    result = CliRunner().invoke(_app(), ["train", "cpu-tiny", "--print-config"])
    assert result.exit_code == 0, result.output
    assert ("rollout:" in result.output) is prints and (result.output == "") is not prints


@pytest.mark.parametrize(("rank", "prints"), [("0", True), ("1", False)])
def test_eval_prints_and_writes_only_on_process_0(monkeypatch, tmp_path, rank, prints):
    import training.commands.train
    monkeypatch.setenv("RANK", rank)
    monkeypatch.setattr(training.commands.train, "evaluate_model", lambda cfg, model: {"eval/x/avg@2": 0.5})
    out = tmp_path / "m.json"
    result = CliRunner().invoke(_app(), ["eval", "cpu-tiny", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert ("avg@2" in result.output) is prints and out.exists() is prints

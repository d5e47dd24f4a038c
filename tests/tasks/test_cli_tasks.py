import json

import pytest
from typer.testing import CliRunner

from training.commands.tasks import app

runner = CliRunner()


def test_list_shows_shipped_sets_with_sizes():
    result = runner.invoke(app, ["list"])
    assert result.exit_code == 0, result.output
    lines = {line.split()[0]: line.split() for line in result.output.splitlines() if line.strip()}
    assert lines["countdown-eval"][1:3] == ["tool", "256"]
    assert lines["countdown-train"][2] == "615"
    assert lines["arith-tool-train"][2] == "2000"


def test_show_and_grade():
    result = runner.invoke(app, ["show", "countdown", "--split", "eval", "--limit", "2"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert [r["id"] for r in rows] == ["countdown-eval-00000", "countdown-eval-00001"]
    result = runner.invoke(app, ["grade", r"\frac{1}{2}", r"so \boxed{0.5}"])
    assert json.loads(result.output) == {"status": "correct", "prediction": "0.5", "correct": True}


def test_show_unknown_name_fails_with_a_hint():
    result = runner.invoke(app, ["show", "countdwn-eval"])
    assert result.exit_code == 1 and "did you mean 'countdown-eval'" in result.output


def test_grade_mode_authors_accepts_what_mathruler_accepts():
    pytest.importorskip("mathruler")
    args = ["grade", "1500", r"so \boxed{1.5e3}"]
    assert json.loads(runner.invoke(app, args).output)["correct"] is False
    assert json.loads(runner.invoke(app, [*args, "--mode", "authors"]).output)["correct"] is True
    result = runner.invoke(app, [*args, "--mode", "paper"])
    assert result.exit_code == 1 and "use one of ('default', 'authors')" in result.output

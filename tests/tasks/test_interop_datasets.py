"""Datasets both ways: verl-style parquet out (read back exactly), SkyRL and verl agent-loop rows in."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import tasks
from tasks.task import Task
from training.commands.tasks import app

TASKS = [Task("c1", "Reach 24 with 3 3 8 8.", "24", "tool", {"grader": "countdown", "numbers": [3, 3, 8, 8]}),
         Task("m1", "What is 1/2 + 1/4?", "\\frac{3}{4}", "short_cot", {"source": "unit"})]


def write(rows, path):
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_export_rows_speak_verl_and_skyrl_and_read_back_exactly(tmp_path):
    path = tasks.save_parquet(TASKS, tmp_path / "out.parquet", system_prompt="Be brief.")
    rows = pq.read_table(path).to_pylist()
    tool, math = rows
    assert tool["prompt"][0] == {"role": "system", "content": "Be brief."}
    assert tool["prompt"][1] == {"role": "user", "content": tasks.format_prompt(TASKS[0])}
    assert tool["reward_model"] == {"style": "rule", "ground_truth": "24"}
    assert tool["reward_spec"] == {"method": "rule", "ground_truth": "24"}
    assert (tool["agent_name"], tool["env_class"]) == ("tool_agent", "stare/PythonTool-v0")
    assert tool["extra_info"]["tools_kwargs"]["code_interpreter"]["create_kwargs"]["ground_truth"] == "24"
    assert (math["agent_name"], math["env_class"], math["data_source"]) == ("single_turn_agent",
                                                                          "stare/MathCoT-v0", "unit")
    assert math["extra_info"]["index"] == 1 and math["extra_info"]["tools_kwargs"] is None
    back = tasks.load(str(path))
    assert [(t.id, t.prompt, t.answer, t.family) for t in back] == [
        (t.id, t.prompt, t.answer, t.family) for t in TASKS]
    assert back[0].meta["numbers"] == [3, 3, 8, 8] and back[0].meta["agent_name"] == "tool_agent"


def test_skyrl_rows_load(tmp_path):
    chat = [{"role": "user", "content": "What is 2+2? " + tasks.COT_SUFFIX}]
    rows = [{"data_source": "gsm8k", "prompt": chat,
             "env_class": "gsm8k", "reward_spec": {"method": "rule", "ground_truth": "4"},
             "extra_info": {"index": 7}}]
    (task,) = tasks.load(str(write(rows, tmp_path / "sky.parquet")))
    assert (task.id, task.prompt, task.answer) == ("gsm8k-7", "What is 2+2?", "4")
    assert (task.meta["env_class"], task.meta["reward_method"]) == ("gsm8k", "rule")


def test_verl_agent_loop_rows_keep_agent_name_and_tools_kwargs(tmp_path):
    tools_kwargs = {"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": "72"}}}
    rows = [{"data_source": "openai/gsm8k", "agent_name": "tool_agent", "ability": "math",
             "prompt": [{"role": "user", "content": "Natalia sold 48 clips..."}],
             "reward_model": {"style": "rule", "ground_truth": None},
             "extra_info": {"index": 0, "need_tools_kwargs": True, "tools_kwargs": tools_kwargs}}]
    (task,) = tasks.load(str(write(rows, tmp_path / "agent.parquet")))
    assert task.answer == "72"  # from the tool's create_kwargs when reward_model has none
    assert task.family == "tool" and task.meta["agent_name"] == "tool_agent"
    assert task.meta["tools_kwargs"] == tools_kwargs


def test_skyrl_row_without_ground_truth_names_the_field(tmp_path):
    rows = [{"prompt": [{"role": "user", "content": "q"}], "env_class": "x",
             "reward_spec": {"method": "rule"}}]
    with pytest.raises(tasks.TaskFileError, match=r"row 0: missing field 'reward_spec.ground_truth'"):
        tasks.load(str(write(rows, tmp_path / "bad.parquet")))


def test_cli_export(tmp_path):
    out = tmp_path / "cd.parquet"
    result = CliRunner().invoke(app, ["export", "countdown-eval", str(out), "--limit", "3"])
    assert result.exit_code == 0, result.output
    assert "wrote 3 tasks" in result.output
    assert [t.id for t in tasks.load(str(out))] == [t.id for t in tasks.load("countdown-eval", limit=3)]
    bad = CliRunner().invoke(app, ["export", "countdown-eval", str(tmp_path / "x.csv")])
    assert bad.exit_code == 1 and "must end in .parquet" in bad.output
    first = pq.read_table(out).to_pylist()[0]["extra_info"]["stare_task"]
    assert json.loads(first)["id"] == "countdown-eval-00000"

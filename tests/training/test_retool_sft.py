"""ReTool-SFT rows become `stare sft` demonstrations with the RL env's own prompt and tool."""

from __future__ import annotations

import json

import pytest

import envs
import tasks
from training.retool_sft import ReToolRowError, convert_file, convert_row, split_trace

USER = ("Solve the following problem step by step. You can write python code in <code></code> and "
        "put the final answer in <answer>\\boxed{}</answer>.\n\n*user question:*\nWhat is 17 * 23?")
TRACE = ("Let me compute it.\n<code>\n```python\nprint(17 * 23)\n```\n</code>\n"
         "<interpreter>\n391\n</interpreter>\n"
         "Check the square as well.<code>```python\nx = 17 * 23\nprint(x * x)```</code>"
         "<interpreter>152881</interpreter>\n"
         "So the product is 391.\n<answer>\n\\boxed{391}\n</answer>")
ROW = {"messages": [{"role": "user", "content": USER}, {"role": "assistant", "content": TRACE}]}


def test_trace_splits_into_calls_replies_and_the_answer():
    messages = split_trace(TRACE)
    assert [m["role"] for m in messages] == ["assistant", "tool", "assistant", "tool", "assistant"]
    assert messages[0]["content"] == "Let me compute it."
    assert messages[0]["tool_calls"] == [{"type": "function", "function": {
        "name": "code_interpreter", "arguments": {"code": "print(17 * 23)"}}}]
    assert messages[1] == {"role": "tool", "name": "code_interpreter", "content": "391"}
    assert messages[2]["tool_calls"][0]["function"]["arguments"]["code"] == "x = 17 * 23\nprint(x * x)"
    assert messages[3]["content"] == "152881"
    assert messages[4] == {"role": "assistant", "content": "So the product is 391.\n\n\\boxed{391}"}


def test_row_gets_the_rl_envs_prompt_and_tool_schema():
    env = envs.make("stare/PythonTool-v0")
    record = convert_row(ROW, env, index=7)
    rl_prompt, info = env.reset(options={"task": tasks.Task("q", "What is 17 * 23?", "391", "tool")})
    env.close()
    assert record["messages"][:len(rl_prompt)] == rl_prompt
    assert record["messages"][len(rl_prompt) - 1]["content"].startswith("What is 17 * 23?")
    assert [t["function"]["name"] for t in record["tools"]] == ["code_interpreter"]
    assert record["task_id"] == "retool-sft-7" and record["source"] == "retool-sft"
    assert len(record["messages"]) == len(rl_prompt) + 5


def test_the_final_answer_is_graded_correct_by_the_env():
    env = envs.make("stare/PythonTool-v0")
    record = convert_row(ROW, env)
    env.reset(options={"task": tasks.Task("q", "What is 17 * 23?", "391", "tool")})
    assert env.step(record["messages"][-1]["content"]).reward == 1.0
    env.close()


@pytest.mark.parametrize("trace, problem", [
    ("no tags at all", "without an <answer>"),
    ("<code>print(1)</code> and then nothing", "no <interpreter> reply"),
    ("<code>print(1)", "never closed by </code>"),
])
def test_malformed_traces_name_what_is_missing(trace, problem):
    with pytest.raises(ReToolRowError, match=problem):
        split_trace(trace, "row 3")


def test_a_row_without_the_question_marker_is_refused():
    env = envs.make("stare/PythonTool-v0")
    bad = {"messages": [{"role": "user", "content": "What is 2+2?"}, ROW["messages"][1]]}
    with pytest.raises(ReToolRowError, match="row 4: messages\\[0\\] has no"):
        convert_row(bad, env, index=4)
    env.close()


def test_file_conversion_writes_one_jsonl_record_per_row(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = tmp_path / "retool.parquet"
    pq.write_table(pa.Table.from_pylist([ROW, ROW]), source)
    out = tmp_path / "demos" / "retool.jsonl"
    assert convert_file(source, out, lambda: envs.make("stare/PythonTool-v0")) == 2
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["task_id"] for r in records] == ["retool-sft-0", "retool-sft-1"]
    assert records[0]["messages"][-1]["content"].endswith("\\boxed{391}")

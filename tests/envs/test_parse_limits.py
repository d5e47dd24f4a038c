"""Hostile probes: `env.step` never raises on any assistant text; parse limits become observations."""

from __future__ import annotations

import pytest

from envs.lookup import LookupEnv, directory_tasks
from envs.math_cot import MathCoTEnv
from envs.parsers import MAX_JSON_DEPTH, ToolCallError, safe_json_loads
from envs.toolformats import FORMATS
from tasks.task import Task

HOSTILE_CALLS = [
    "<tool_call>" + "[" * 1000 + "]" * 1000 + "</tool_call>",                       # RecursionError before
    '<tool_call>{"name": "lookup", "arguments": {"name": ' + "9" * 4301 + "}}</tool_call>",   # ValueError
    '<tool_call>{"name": "lookup", "arguments": "' + "[" * 5000 + '"}</tool_call>',          # double-encoded
    '<tool_call>{"name": "lookup", "arguments": {"name": ' + "[" * 900 + "]" * 900 + "}}</tool_call>",
    "<tool_call>" + '{"a":' * 3000 + "1" + "}" * 3000,                                # unclosed, deep
]


@pytest.mark.parametrize("text", HOSTILE_CALLS)
def test_hostile_tool_calls_are_malformed_call_observations(text):
    env = LookupEnv()
    env.reset(options={"task": directory_tasks()[0]})
    result = env.step(text)
    assert not result.terminated and result.info["tool_errors"] == 1
    assert result.info["error_kinds"] == ["malformed_call"]
    assert result.messages[0]["content"].startswith("Error: malformed tool call: ")
    assert len(result.messages[0]["content"]) < 300          # the observation does not echo the flood


def test_final_answer_with_a_huge_integer_is_graded_not_raised():
    task = Task(id="t", prompt="1+1?", answer="2", family="short_cot", meta={})
    env = MathCoTEnv(dataset=[task])
    env.reset(options={"task": task})
    result = env.step("\\boxed{" + "9" * 5000 + "}")
    assert result.terminated and result.reward == 0.0 and result.info["grade"]["status"] == "wrong"


@pytest.mark.parametrize("depth, ok", [(MAX_JSON_DEPTH, True), (MAX_JSON_DEPTH + 1, False)])
def test_safe_json_loads_depth_bound(depth, ok):
    value, problem = safe_json_loads("[" * depth + "]" * depth)
    assert (problem is None) is ok
    assert (value is not None) is ok


def test_safe_json_loads_never_raises_and_keeps_normal_values():
    assert safe_json_loads('{"a": [1, 2.5, "x"]}') == ({"a": [1, 2.5, "x"]}, None)
    assert safe_json_loads("9" * 5000) == (None, "JSON number too long")
    assert safe_json_loads("{")[1].startswith("invalid JSON")
    assert isinstance(ToolCallError("x").message, str)


FORMAT_FLOODS = ["[TOOL_CALLS]" + "[" * 2000 + "]" * 2000, "[TOOL_CALLS][" + "9" * 5000 + "]",
                 "<|python_tag|>[" + "[" * 3000 + "]" * 3000 + "]", "<tool_call>" + "{" * 3000]


@pytest.mark.parametrize("text", FORMAT_FLOODS)
@pytest.mark.parametrize("name", sorted(FORMATS))
def test_every_tool_call_format_turns_parse_limits_into_malformed_calls(name, text):
    attempts = FORMATS[name]().parse(text, LookupEnv().tools)      # never raises
    assert all(isinstance(a, ToolCallError) for a in attempts)

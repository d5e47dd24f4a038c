"""Remote tools without a server: MCP schema conversion, RemoteTool inside a TextEnv, step_calls."""

import pytest

import envs
from envs.core import TextEnv
from envs.remote import RemoteTool, openai_schema, tool_result_text
from envs.tools import ToolCall
from tasks.task import Task

TASK = Task("t", "What is 2 + 3?", "5", "tool")


def test_openai_schema_of_an_mcp_tool():
    schema = openai_schema("f", None, {"type": "object", "properties": {
        "a": {"type": "integer"}, "b": {"type": ["string", "null"]}, "c": {}}, "required": ["a", "zzz"]})
    fn = schema["function"]
    assert (fn["name"], fn["description"]) == ("f", "f")  # a missing description becomes the name
    assert fn["parameters"]["properties"] == {
        "a": {"type": "integer"}, "b": {"type": "string", "nullable": True}, "c": {"type": "string"}}
    assert fn["parameters"]["required"] == ["a"]  # required names must be properties
    assert envs.checker.schema_problems(schema) == []


def test_tool_results_and_errors():
    ok = {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "isError": False}
    assert tool_result_text(ok, "f") == "a\nb"
    assert tool_result_text({"content": []}, "f") == "(no output)"
    with pytest.raises(envs.ToolError, match="boom"):
        tool_result_text({"content": [{"type": "text", "text": "boom"}], "is_error": True}, "f")


def test_remote_tool_in_a_text_env_and_step_calls_match_a_parsed_turn():
    calls = []

    def call(name, arguments):
        calls.append((name, arguments))
        return str(arguments["a"] + arguments["b"])

    schema = openai_schema("add", "Add.", {"type": "object", "properties": {"a": {"type": "integer"},
                                                                          "b": {"type": "integer"}},
                                           "required": ["a", "b"]})
    env = TextEnv(dataset=[TASK], tools=[RemoteTool("add", schema, call)], max_tool_turns=1)
    env.reset()
    parsed = env.step('<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>')
    env.reset()
    direct = env.step_calls([ToolCall("add", {"a": 2, "b": 3})])
    assert direct == parsed and direct.messages[0]["content"] == "5" and len(calls) == 2
    over = env.step_calls([ToolCall("add", {"a": 1, "b": 1})])  # past max_tool_turns: truncated
    assert (over.truncated, over.info["truncated_reason"], len(calls)) == (True, "max_tool_turns", 2)
    with pytest.raises(envs.ResetNeeded):
        env.step_calls([ToolCall("add", {"a": 1, "b": 1})])
    env.reset()
    with pytest.raises(ValueError, match="at least one call"):
        env.step_calls([])

"""Tool-call formats: parsing per family, history messages with call ids, detection from templates."""

import json
from pathlib import Path

import pytest

from envs import FORMATS, TextEnv, ToolCall, ToolCallError, ToolSet, detect_format, get_parser
from envs.toolformats import AutoFormat, HermesFormat, MistralFormat, call_id
from tasks.task import Task

TEMPLATES = Path(__file__).parents[1] / "agents" / "data" / "templates"


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: First addend.
        b: Second addend.
    """
    return a + b


TOOLS = ToolSet([add])
CALL = ToolCall("add", {"a": 2, "b": 3})


@pytest.mark.parametrize(("name", "text", "expected"), [
    ("hermes", '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>', [CALL]),
    ("qwen3", '<think>\nadd them\n</think>\n\n<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n'
              "</tool_call>", [CALL]),
    ("qwen3", '<think>\n<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>\n</think>\n\n'
              "\\boxed{5}", []),
    ("qwen3", '<think>\nstill thinking <tool_call>{"name": "add", "arguments": {}}</tool_call>', []),
    ("llama3_json", '{"name": "add", "parameters": {"a": 2, "b": 3}}', [CALL]),
    ("llama3_json", '<|python_tag|>{"name": "add", "parameters": {"a": 2, "b": 3}}', [CALL]),
    ("llama3_json", '[{"name": "add", "parameters": {"a": 2, "b": 3}}, {"name": "add", "arguments": '
                    '{"a": 2, "b": 3}}]', [CALL, CALL]),
    ("llama3_json", "The sum is \\boxed{5}.", []),
    ("mistral", '[TOOL_CALLS][{"name": "add", "arguments": {"a": 2, "b": 3}, "id": "a1b2c3d4e"}]', [CALL]),
    ("mistral", 'Let me add. [TOOL_CALLS] [{"name": "add", "arguments": {"a": 2, "b": 3}}]', [CALL]),
    ("mistral", "The sum is \\boxed{5}.", []),
])
def test_each_format_finds_its_calls(name, text, expected):
    assert get_parser(name).parse(text, TOOLS) == expected


@pytest.mark.parametrize(("name", "text"), [
    ("hermes", '<tool_call>{"name": "add", "arguments": {"a": 2,</tool_call>'),
    ("qwen3", '<think>\nok\n</think>\n\n<tool_call>\n{"name": "add"\n</tool_call>'),
    ("llama3_json", '{"name": "add", "parameters": {"a": 2,'),
    ("llama3_json", '{"parameters": {"a": 2}}'),
    ("llama3_json", "[]"),
    ("mistral", '[TOOL_CALLS][{"name": "add", "arguments": {"a": 2,'),
    ("mistral", '[TOOL_CALLS][{"name": "add", "arguments": [1, 2]}]'),
])
def test_malformed_calls_are_the_same_error_kind_in_every_format(name, text):
    (error,) = get_parser(name).parse(text, TOOLS)
    assert isinstance(error, ToolCallError) and error.kind == "malformed_call"
    assert error.message.startswith("Error: malformed tool call: ")
    assert ("<tool_call>" in error.message) == (name in ("hermes", "qwen3"))
    task = Task(id="t", prompt="2 + 3?", answer="5", family="tool")
    env = TextEnv(dataset=[task], tools=[add], parser=name)
    env.reset()
    result = env.step(text)
    assert result.info["error_kinds"] == ["malformed_call"] and result.messages[0]["content"] == error.message


def test_mistral_history_has_structured_calls_with_linked_9_character_ids():
    fmt = MistralFormat()
    text = ('[TOOL_CALLS][{"name": "add", "arguments": {"a": 2, "b": 3}, "id": "a1b2c3d4e"}, '
            '{"name": "add", "arguments": {"a": 1, "b": 1}, "id": "bad"}]')
    message = fmt.assistant_message(text, turn=3)
    assert message["content"] == "" and [c["id"] for c in message["tool_calls"]] == ["a1b2c3d4e", "call00301"]
    assert json.loads(message["tool_calls"][1]["function"]["arguments"]) == {"a": 1, "b": 1}
    tools = fmt.tool_messages([{"role": "tool", "content": "5", "tool_call_id": "call_3_0"},
                               {"role": "tool", "content": "2", "tool_call_id": "call_3_1"},
                               {"role": "tool", "content": "extra"}], message, turn=3)
    assert [t["tool_call_id"] for t in tools] == ["a1b2c3d4e", "call00301", "call00302"]
    assert all(len(t["tool_call_id"]) == 9 for t in tools) and call_id(12, 7) == "call01207"
    broken = fmt.assistant_message('[TOOL_CALLS][{"name": "add", "arguments": {', turn=0)
    assert broken == {"role": "assistant", "content": '[TOOL_CALLS][{"name": "add", "arguments": {'}


def test_hermes_history_keeps_the_text_and_the_env_ids():
    fmt = HermesFormat()
    assert fmt.assistant_message("hi", 0) == {"role": "assistant", "content": "hi"}
    assert fmt.tool_messages([{"role": "tool", "content": "5", "tool_call_id": "call_1_0"}], {}, 0)[0][
        "tool_call_id"] == "call_1_0"


def test_detect_format_from_the_real_templates():
    found = {p.stem: detect_format(p.read_text()) for p in TEMPLATES.glob("*.jinja")}
    assert found == {"qwen3": "qwen3", "llama3_1": "llama3_json", "mistral_v3": "mistral"}
    assert detect_format("{{ '<tool_call>' }}") == "hermes" and detect_format("{{ messages }}") is None
    assert detect_format(None) is None


def test_auto_format_binds_to_the_detected_format():
    auto = get_parser("auto")
    assert isinstance(auto, AutoFormat) and auto.parse('<tool_call>{"name": "add"}</tool_call>', TOOLS)
    auto.bind((TEMPLATES / "mistral_v3.jinja").read_text())
    assert auto.format.name == "mistral" and auto.parse("[TOOL_CALLS][]", TOOLS)[0].kind == "malformed_call"
    assert sorted(FORMATS) == ["hermes", "llama3_json", "mistral", "qwen3"]

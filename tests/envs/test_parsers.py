from __future__ import annotations

import pytest

from envs.parsers import (
    BlockParser,
    HermesParser,
    PythonBlockParser,
    ToolCallError,
    code_tool_argument,
    get_parser,
)
from envs.tools import ToolCall, ToolSet


def code_interpreter(code: str) -> str:
    """Run code.

    Args:
        code: Source.
    """
    return code


def add(a: int, b: int) -> str:
    """Add.

    Args:
        a: A.
        b: B.
    """
    return str(a + b)


TOOLS = ToolSet([add, code_interpreter])


def test_hermes_reads_every_call_in_order():
    text = ('Let me compute. <tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call> and '
            '<tool_call>\n{"name": "code_interpreter", "arguments": {"code": "print(1)"}}\n</tool_call>')
    assert HermesParser().parse(text, TOOLS) == [ToolCall("add", {"a": 1, "b": 2}),
                                                ToolCall("code_interpreter", {"code": "print(1)"})]


def test_hermes_no_markup_means_final_answer():
    assert HermesParser().parse("The answer is \\boxed{3}.", TOOLS) == []


def test_hermes_accepts_a_final_call_whose_close_tag_was_eaten_by_the_stop_string():
    assert HermesParser().parse('<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}', TOOLS) == [
        ToolCall("add", {"a": 1, "b": 2})]


def test_hermes_accepts_double_encoded_arguments():
    text = '<tool_call>{"name": "add", "arguments": "{\\"a\\": 1, \\"b\\": 2}"}</tool_call>'
    assert HermesParser().parse(text, TOOLS) == [ToolCall("add", {"a": 1, "b": 2})]


@pytest.mark.parametrize("text, fragment", [
    ("<tool_call>{not json</tool_call>", "invalid JSON"),
    ("<tool_call>{not json", "invalid JSON"),
    ('<tool_call>["add"]</tool_call>', 'expected a JSON object with a "name" string'),
    ('<tool_call>{"arguments": {}}</tool_call>', 'expected a JSON object with a "name" string'),
    ('<tool_call>{"name": "add", "arguments": [1, 2]}</tool_call>', '"arguments" must be a JSON object'),
    ("done </tool_call>", "</tool_call> without <tool_call>"),
])
def test_hermes_malformed_calls_become_errors_with_a_format_hint(text, fragment):
    (result,) = HermesParser().parse(text, TOOLS)
    assert isinstance(result, ToolCallError) and result.kind == "malformed_call"
    assert fragment in result.message and "<tool_call>{" in result.message


def test_python_blocks_map_to_the_code_tool():
    text = "Try:\n```python\nx = 2\nprint(x)\n```\nthen\n```python\nprint(x + 1)"
    assert PythonBlockParser().parse(text, TOOLS) == [
        ToolCall("code_interpreter", {"code": "x = 2\nprint(x)"}),
        ToolCall("code_interpreter", {"code": "print(x + 1)"})]
    assert PythonBlockParser().parse("no code, \\boxed{1}", TOOLS) == []


def test_empty_block_is_malformed():
    (result,) = PythonBlockParser().parse("```python\n\n```", TOOLS)
    assert isinstance(result, ToolCallError)


def test_block_parser_needs_a_single_string_tool():
    with pytest.raises(ValueError, match="single string argument"):
        code_tool_argument(ToolSet([add]))
    assert BlockParser("<run>", "</run>").parse("<run>print(1)</run>", TOOLS) == [
        ToolCall("code_interpreter", {"code": "print(1)"})]


def test_get_parser_by_name_or_object():
    assert isinstance(get_parser("hermes"), HermesParser)
    assert isinstance(get_parser("python"), PythonBlockParser)
    custom = BlockParser("<a>", "</a>")
    assert get_parser(custom) is custom
    with pytest.raises(ValueError, match="unknown tool-call parser 'xml'"):
        get_parser("xml")
    with pytest.raises(TypeError, match="parse"):
        get_parser(42)

from __future__ import annotations

from typing import Literal

import pytest

from envs.errors import EpisodeError, ToolCrashed, ToolError
from envs.tools import ToolCall, ToolSet, function_schema, truncate_middle


def convert(value: float, unit: Literal["km", "mi"], digits: int = 2, note: str | None = None,
            tags: list[str] | None = None) -> str:
    """Convert a distance.

    Longer explanation that spans
    two lines.

    Args:
        value: The distance.
        unit: Unit of `value`; the
            other unit is the target.
        digits: Decimals to keep.
        note: Free text.
        tags: Labels.

    Returns:
        The converted distance.
    """
    if value < 0:
        raise ToolError("Error: distance must be >= 0.", kind="negative")
    factor = 0.621371 if unit == "km" else 1 / 0.621371
    return f"{round(value * factor, digits)}"


def test_schema_from_signature_and_docstring():
    fn = function_schema(convert)["function"]
    assert fn["name"] == "convert"
    assert fn["description"] == "Convert a distance. Longer explanation that spans two lines."
    props = fn["parameters"]["properties"]
    assert props["value"] == {"type": "number", "description": "The distance."}
    assert props["unit"] == {"type": "string", "enum": ["km", "mi"],
                             "description": "Unit of `value`; the other unit is the target."}
    assert props["digits"]["type"] == "integer"
    assert props["note"] == {"type": "string", "nullable": True, "description": "Free text."}
    assert props["tags"]["items"] == {"type": "string"} and props["tags"]["nullable"]
    assert fn["parameters"]["required"] == ["value", "unit"]


def test_schema_matches_transformers_get_json_schema():
    # What tokenizer.apply_chat_template(..., tools=[fn]) builds from the same function.
    from transformers.utils import get_json_schema

    def lookup(name: str, limit: int = 3) -> str:
        """Look up a person.

        Args:
            name: Full name.
            limit: Maximum records.
        """
        return name

    ours, theirs = function_schema(lookup), get_json_schema(lookup)
    assert ours["function"]["name"] == theirs["function"]["name"]
    assert ours["function"]["description"] == theirs["function"]["description"]
    assert ours["function"]["parameters"]["required"] == theirs["function"]["parameters"]["required"]
    for arg in ("name", "limit"):
        theirs_arg = theirs["function"]["parameters"]["properties"][arg]
        assert ours["function"]["parameters"]["properties"][arg] == theirs_arg


def test_schema_of_bound_method_skips_self():
    class Box:
        def peek(self, key: str) -> str:
            """Peek.

            Args:
                key: Key.
            """
            return key

    assert list(function_schema(Box().peek)["function"]["parameters"]["properties"]) == ["key"]


@pytest.mark.parametrize("bad, message", [
    (lambda x: x, "docstring"),
])
def test_schema_rejects_undocumented_function(bad, message):
    with pytest.raises(TypeError, match=message):
        function_schema(bad)


def test_schema_rejects_missing_annotation_and_missing_arg_doc():
    def no_hint(x) -> str:
        """Tool.

        Args:
            x: X.
        """

    def no_arg_doc(x: str) -> str:
        """Tool without an Args section."""

    with pytest.raises(TypeError, match="'x' needs a type annotation"):
        function_schema(no_hint)
    with pytest.raises(TypeError, match="'x' needs an entry under 'Args:'"):
        function_schema(no_arg_doc)


def test_toolset_runs_a_good_call():
    assert ToolSet([convert]).run(ToolCall("convert", {"value": 10, "unit": "km"})).content == "6.21"


@pytest.mark.parametrize("call, kind, text", [
    (ToolCall("nope", {}), "unknown_tool", "unknown tool 'nope'. Available tools: convert"),
    (ToolCall("convert", {"unit": "km"}), "bad_arguments", "missing required argument 'value'"),
    (ToolCall("convert", {"value": 1, "unit": "km", "speed": 3}), "bad_arguments",
     "unexpected argument 'speed'"),
    (ToolCall("convert", {"value": "ten", "unit": "km"}), "bad_arguments", "'value' must be number, got str"),
    (ToolCall("convert", {"value": True, "unit": "km"}), "bad_arguments", "'value' must be number, got bool"),
    (ToolCall("convert", {"value": 1, "unit": "yd"}), "bad_arguments", "'unit' must be ['km', 'mi']"),
    (ToolCall("convert", {"value": 1, "unit": "km", "digits": 1.5}), "bad_arguments",
     "'digits' must be integer"),
    (ToolCall("convert", {"value": -1, "unit": "km"}), "negative", "distance must be >= 0"),
])
def test_each_model_mistake_is_a_distinct_observation(call, kind, text):
    outcome = ToolSet([convert]).run(call)
    assert outcome.error == kind
    assert text in outcome.content


def test_none_is_accepted_for_optional_arguments():
    assert ToolSet([convert]).run(ToolCall("convert", {"value": 1, "unit": "mi", "note": None})).error is None


def test_tool_bug_is_a_world_failure_not_an_observation():
    def broken(x: str) -> str:
        """Broken tool.

        Args:
            x: Anything.
        """
        raise KeyError(x)

    def infra(x: str) -> str:
        """Backend down.

        Args:
            x: Anything.
        """
        raise EpisodeError("backend down")

    with pytest.raises(ToolCrashed, match="tool 'broken' crashed: KeyError"):
        ToolSet([broken]).run(ToolCall("broken", {"x": "a"}))
    with pytest.raises(EpisodeError, match="backend down"):
        ToolSet([infra]).run(ToolCall("infra", {"x": "a"}))


def test_duplicate_tool_names_are_a_config_error():
    with pytest.raises(ValueError, match="two tools are named 'convert'"):
        ToolSet([convert, convert])


def test_truncate_middle_keeps_head_tail_and_a_visible_marker():
    text = "".join(chr(97 + i % 26) for i in range(1000))
    out = truncate_middle(text, 200)
    assert len(out) <= 200
    head, marker, tail = out.split("\n")
    assert text.startswith(head) and text.endswith(tail)
    omitted = 1000 - len(head) - len(tail)
    assert marker == f"...[{omitted} characters omitted]..."
    assert abs(len(head) - len(tail)) <= 1


def test_truncate_middle_leaves_short_text_alone_and_rejects_tiny_budgets():
    assert truncate_middle("abc", 64) == "abc"
    with pytest.raises(ValueError, match="budget must be >= 64"):
        truncate_middle("abc", 10)


def test_toolset_applies_the_output_budget():
    def loud(n: int) -> str:
        """Print a lot.

        Args:
            n: Characters.
        """
        return "x" * n

    out = ToolSet([loud], max_output_chars=100).run(ToolCall("loud", {"n": 5000})).content
    assert len(out) <= 100 and "characters omitted" in out

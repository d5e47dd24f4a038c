"""Tools are plain typed functions; this module derives their schemas and runs their calls.

`function_schema(fn)` builds the OpenAI function schema (what `tokenizer.apply_chat_template(...,
tools=...)` takes) from the signature and the Google docstring. `ToolSet.run(call)` executes one parsed
call and maps every model mistake (unknown tool, bad arguments, `ToolError`) to a short observation.
"""

from __future__ import annotations

import copy
import inspect
import re
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Union, get_args, get_origin

from envs.errors import EpisodeError, ToolCrashed, ToolError

_JSON_TYPES: dict[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean",
                                list: "array", tuple: "array", dict: "object"}
_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$")
_SECTION = re.compile(r"^\s*[A-Z][A-Za-z ]*:\s*$")
_ARG_LINE = re.compile(r"^\s*(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


@dataclass(frozen=True)
class ToolCall:
    """One parsed tool call: the tool name and its JSON arguments."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolOutcome:
    """What one tool call produced: the observation text and, on failure, the error kind."""

    name: str
    content: str
    error: str | None = None
    """None on success; otherwise a kind: malformed_call, unknown_tool, bad_arguments, or the tool's own."""


def truncate_middle(text: str, budget: int) -> str:
    """Cut `text` to at most `budget` characters, keeping its head and tail around a visible marker.

    The marker reads `...[N characters omitted]...` on its own line, so the model can tell output
    was cut (and how much), unlike a silent head-only cut.

    Args:
        text: Any tool output.
        budget: Maximum length of the result in characters (>= 64).
    """
    if budget < 64:
        raise ValueError(f"budget must be >= 64 characters to fit the truncation marker, got {budget}")
    if len(text) <= budget:
        return text
    marker = f"\n...[{len(text)} characters omitted]...\n"  # an upper bound on the final marker length
    keep = budget - len(marker)
    head, tail = keep - keep // 2, keep // 2
    omitted = len(text) - head - tail
    return f"{text[:head]}\n...[{omitted} characters omitted]...\n{text[len(text) - tail:]}"


def _type_schema(hint: Any) -> dict[str, Any]:
    """JSON schema of one annotation: builtins, list[X], dict, Literal[...], X | None."""
    origin, args = get_origin(hint), get_args(hint)
    if origin is Literal:
        return {"type": _JSON_TYPES[type(args[0])], "enum": list(args)}
    if origin in (Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        schema = _type_schema(inner[0]) if len(inner) == 1 else {"anyOf": [_type_schema(a) for a in inner]}
        return {**schema, "nullable": True} if len(inner) < len(args) else schema
    if origin in (list, tuple, Sequence) or hint in (list, tuple):
        return {"type": "array", "items": _type_schema(args[0])} if args else {"type": "array"}
    if origin is dict or hint is dict:
        return {"type": "object"}
    if hint in _JSON_TYPES:
        return {"type": _JSON_TYPES[hint]}
    raise TypeError(f"tool argument type {hint!r} has no JSON schema; use str, int, float, bool, list, dict, "
                    "Literal or X | None")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a Google docstring into (description, {arg: description})."""
    lines = inspect.cleandoc(doc).splitlines()
    description, args, current, in_args = [], {}, None, False
    for line in lines:
        if _ARGS_HEADER.match(line):
            in_args = True
        elif in_args and _SECTION.match(line) and not line.startswith((" ", "\t")):
            in_args = False
        elif in_args and (m := _ARG_LINE.match(line)) and len(line) - len(line.lstrip()) <= 4:
            current = m.group(1)
            args[current] = m.group(2).strip()
        elif in_args and current and line.strip():
            args[current] = f"{args[current]} {line.strip()}"
        elif not in_args and not args:
            description.append(line)
    return " ".join(" ".join(description).split()), args


def function_schema(fn: Callable[..., Any]) -> dict[str, Any]:
    """OpenAI function schema of a typed, documented function.

    Returns `{"type": "function", "function": {"name", "description", "parameters": {"type": "object",
    "properties", "required"}}}`; arguments without a default are required.

    An object with an `openai_schema` dict attribute (e.g. `envs.remote.RemoteTool`) is described by it.

    Args:
        fn: A function (or bound method) whose every argument is annotated and whose docstring has a
            summary and an `Args:` entry per argument.

    Raises:
        TypeError: An argument has no annotation, an unsupported type, or no docstring entry.
    """
    declared = getattr(fn, "openai_schema", None)
    if isinstance(declared, dict):  # a remote tool (MCP, OpenEnv) brings its schema with it
        return copy.deepcopy(declared)
    name = getattr(fn, "__name__", type(fn).__name__)
    if not fn.__doc__:
        raise TypeError(f"tool {name!r} has no docstring; the model needs a description of the tool")
    description, arg_docs = _parse_docstring(fn.__doc__)
    hints = typing.get_type_hints(fn)
    properties, required = {}, []
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {name!r}: *args/**kwargs cannot be described to the model; "
                            "name each argument")
        if param.name not in hints:
            raise TypeError(f"tool {name!r}: argument {param.name!r} needs a type annotation")
        if param.name not in arg_docs:
            raise TypeError(f"tool {name!r}: argument {param.name!r} needs an entry under 'Args:' "
                            "in the docstring")
        properties[param.name] = {**_type_schema(hints[param.name]), "description": arg_docs[param.name]}
        if param.default is param.empty:
            required.append(param.name)
    parameters = {"type": "object", "properties": properties, "required": required}
    function = {"name": name, "description": description, "parameters": parameters}
    return {"type": "function", "function": function}


def _matches(value: Any, schema: dict[str, Any]) -> bool:
    """Does a JSON value fit a property schema (shallow: type, enum, nullable)?"""
    if value is None:
        return bool(schema.get("nullable"))
    if "anyOf" in schema:
        return any(_matches(value, s) for s in schema["anyOf"])
    if "enum" in schema and value not in schema["enum"]:
        return False
    kind = schema.get("type")
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    expected = {"string": str, "boolean": bool, "array": list, "object": dict}.get(kind)
    return expected is None or isinstance(value, expected)


class ToolSet:
    """The tools of one env: their schemas, and a `run` that never raises for the model's mistakes.

    Args:
        tools: Typed, documented functions (bound methods are fine). Names must be unique.
        max_output_chars: Budget of every tool message; longer output is cut in the middle.
    """

    def __init__(self, tools: Sequence[Callable[..., Any]] = (), *, max_output_chars: int = 2048) -> None:
        truncate_middle("", max_output_chars)  # validates the budget
        self.max_output_chars = max_output_chars
        self._tools: dict[str, Callable[..., Any]] = {}
        self.schemas: list[dict[str, Any]] = []
        for fn in tools:
            schema = function_schema(fn)
            name = schema["function"]["name"]
            if name in self._tools:
                raise ValueError(f"two tools are named {name!r}; tool names must be unique")
            self._tools[name] = fn
            self.schemas.append(schema)

    @property
    def names(self) -> list[str]:
        """Tool names in declaration order."""
        return list(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    def run(self, call: ToolCall) -> ToolOutcome:
        """Execute one call: the tool's output, or a short observation naming the model's mistake.

        Raises:
            EpisodeError: The tool raised an `EpisodeError` or crashed with a non-`ToolError` exception.
        """
        if call.name not in self._tools:
            known = ", ".join(self._tools) or "none"
            return ToolOutcome(call.name, f"Error: unknown tool '{call.name}'. Available tools: {known}.",
                               "unknown_tool")
        problem = self._check_arguments(call)
        if problem:
            message = f"Error: bad arguments for {call.name}: {problem}."
            return ToolOutcome(call.name, message, "bad_arguments")
        try:
            output = self._tools[call.name](**call.arguments)
        except ToolError as err:
            return ToolOutcome(call.name, truncate_middle(str(err), self.max_output_chars), err.kind)
        except EpisodeError:
            raise
        except Exception as err:  # a bug in the tool or its backend: a world failure, not the model's
            raise ToolCrashed(f"tool {call.name!r} crashed: {type(err).__name__}: {err}") from err
        return ToolOutcome(call.name, truncate_middle(str(output), self.max_output_chars))

    def _check_arguments(self, call: ToolCall) -> str | None:
        """First problem with the call's arguments, or None when they fit the schema."""
        params = self.schemas[self.names.index(call.name)]["function"]["parameters"]
        unknown = sorted(set(call.arguments) - set(params["properties"]))
        if unknown:
            return f"unexpected argument '{unknown[0]}' (expected: {', '.join(params['properties'])})"
        for name in params["required"]:
            if name not in call.arguments:
                return f"missing required argument '{name}'"
        for name, value in call.arguments.items():
            schema = params["properties"][name]
            if not _matches(value, schema):
                want = schema.get("enum") or schema.get("type") or "a valid value"
                return f"argument '{name}' must be {want}, got {type(value).__name__}"
        return None

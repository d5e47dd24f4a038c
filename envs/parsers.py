"""Tool-call parsers: find the calls in an assistant turn's text.

`parse(text, tools)` returns a list with one entry per call attempt: a `ToolCall`, or a
`ToolCallError` (a malformed attempt, shown to the model as an observation). An empty list means the
turn made no call attempt, i.e. it is a final answer.

- `HermesParser` (default): `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, what the
  Qwen2.5 / Qwen3 chat templates emit. A final unclosed `<tool_call>` is accepted when its body is
  valid JSON, because generation often stops at (and drops) the `</tool_call>` stop string.
- `BlockParser`: the raw body of a delimited block becomes the single string argument of the
  env's code tool; `PythonBlockParser` reads fenced ```` ```python ```` blocks, for base models.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from envs.tools import ToolCall, ToolSet

MALFORMED = "Error: malformed tool call: "
HERMES_HINT = 'Use <tool_call>{"name": "<tool>", "arguments": {...}}</tool_call>.'
MAX_JSON_DEPTH = 32
"""Deepest nesting of arrays/objects a tool call may use; deeper is a malformed call, not a crash."""


def safe_json_loads(text: str, max_depth: int = MAX_JSON_DEPTH) -> tuple[Any, str | None]:
    """Decode model-written JSON without ever raising: ``(value, None)`` or ``(None, why it is refused)``.

    Besides syntax errors it refuses what would crash the caller later: nesting deeper than
    ``max_depth`` (``json.loads`` raises RecursionError near ~1,000 levels, and code that walks the
    value recursively fails well before) and integers beyond Python's 4,300-digit conversion limit.
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        return None, f"invalid JSON ({err.msg} at char {err.pos})"
    except RecursionError:
        return None, f"JSON nested deeper than {max_depth} levels"
    except ValueError:   # int() refused a number with more than sys.get_int_max_str_digits() digits
        return None, "JSON number too long"
    if _depth_exceeds(value, max_depth):
        return None, f"JSON nested deeper than {max_depth} levels"
    return value, None


def _depth_exceeds(value: Any, limit: int) -> bool:
    """Whether arrays/objects nest more than ``limit`` deep (iterative: no recursion on hostile input)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            if depth > limit:
                return True
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False


@dataclass(frozen=True)
class ToolCallError:
    """A call attempt that could not be parsed; `message` is what the model sees."""

    message: str
    kind: str = "malformed_call"


class ToolCallParser(Protocol):
    """Finds tool-call attempts in assistant text."""

    def parse(self, text: str, tools: ToolSet) -> list[ToolCall | ToolCallError]:
        """One entry per call attempt, in order; empty when the text makes no attempt."""
        ...


def _decode_hermes(body: str) -> ToolCall | ToolCallError:
    """Decode one Hermes JSON body into a call, or say what is malformed about it."""
    obj, problem = safe_json_loads(body)
    if problem is not None:
        return ToolCallError(f"{MALFORMED}{problem}. {HERMES_HINT}")
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return ToolCallError(f'{MALFORMED}expected a JSON object with a "name" string. {HERMES_HINT}')
    arguments = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(arguments, str):  # some models double-encode the arguments
        decoded, problem = safe_json_loads(arguments)
        if problem is None:
            arguments = decoded
    if not isinstance(arguments, dict):
        return ToolCallError(f'{MALFORMED}"arguments" must be a JSON object. {HERMES_HINT}')
    return ToolCall(obj["name"], arguments)


class HermesParser:
    """Parses `<tool_call>{json}</tool_call>` blocks (Hermes / Qwen format)."""

    open_tag = "<tool_call>"
    close_tag = "</tool_call>"

    def parse(self, text: str, tools: ToolSet) -> list[ToolCall | ToolCallError]:
        """Decode every `<tool_call>` block of `text`; see the module docstring for the unclosed case."""
        results: list[ToolCall | ToolCallError] = []
        pos = 0
        while (start := text.find(self.open_tag, pos)) != -1:
            body_start = start + len(self.open_tag)
            end = text.find(self.close_tag, body_start)
            if end == -1:  # unclosed: only the last block can be, and only valid JSON counts
                results.append(_decode_hermes(text[body_start:].strip()))
                break
            results.append(_decode_hermes(text[body_start:end].strip()))
            pos = end + len(self.close_tag)
        if not results and self.close_tag in text:
            results.append(ToolCallError(f"{MALFORMED}</tool_call> without <tool_call>. {HERMES_HINT}"))
        return results


def code_tool_argument(tools: ToolSet) -> tuple[str, str]:
    """(tool name, argument name) of the env's code tool: the first tool with exactly one string argument.

    Raises:
        ValueError: No tool takes a single string argument, so raw blocks cannot be mapped to a call.
    """
    for schema in tools.schemas:
        params = schema["function"]["parameters"]
        props = params["properties"]
        if len(props) == 1 and next(iter(props.values())).get("type") == "string":
            return schema["function"]["name"], next(iter(props))
    raise ValueError(f"a block parser needs a tool with a single string argument; tools are {tools.names}. "
                     "Use parser='hermes' for this env.")


class BlockParser:
    r"""Maps the raw body of each `open ... close` block to the code tool's single string argument.

    Args:
        open_tag: Text that opens a block (e.g. "```python\n").
        close_tag: Text that closes it (e.g. "```"). A final unclosed block runs to the end of the text.
    """

    def __init__(self, open_tag: str, close_tag: str) -> None:
        if not open_tag or not close_tag:
            raise ValueError("BlockParser needs non-empty open_tag and close_tag")
        self.open_tag, self.close_tag = open_tag, close_tag

    def parse(self, text: str, tools: ToolSet) -> list[ToolCall | ToolCallError]:
        """One call of the code tool per block, with the block body as its argument."""
        name, arg = code_tool_argument(tools)
        results: list[ToolCall | ToolCallError] = []
        pos = 0
        while (start := text.find(self.open_tag, pos)) != -1:
            body_start = start + len(self.open_tag)
            end = text.find(self.close_tag, body_start)
            body = text[body_start:] if end == -1 else text[body_start:end]
            results.append(ToolCall(name, {arg: body.strip("\n")}) if body.strip()
                           else ToolCallError(f"{MALFORMED}empty {self.open_tag.strip()} block."))
            if end == -1:
                break
            pos = end + len(self.close_tag)
        return results


class PythonBlockParser(BlockParser):
    """Fenced ```` ```python ```` blocks run on the code tool (for base models without a tool template)."""

    def __init__(self) -> None:
        super().__init__("```python\n", "```")


PARSERS: dict[str, Callable[[], ToolCallParser]] = {"hermes": HermesParser, "python": PythonBlockParser}
"""Parser factories by name, for the `parser=` argument of every env."""


def get_parser(parser: str | ToolCallParser) -> ToolCallParser:
    """A parser instance from a name in `PARSERS` or an object with `parse(text, tools)`."""
    if isinstance(parser, str):
        if parser not in PARSERS:
            raise ValueError(f"unknown tool-call parser {parser!r}; known: {sorted(PARSERS)} "
                             "(or pass an object with parse(text, tools))")
        return PARSERS[parser]()
    if not callable(getattr(parser, "parse", None)):
        raise TypeError(f"parser must be a name in {sorted(PARSERS)} or have parse(text, tools); "
                        f"got {parser!r}")
    return parser

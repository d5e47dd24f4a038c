"""Tools that live in another process: an MCP server's tools or an OpenEnv server's, as `TextEnv` tools.

A `RemoteTool` is a callable with an `openai_schema`, so a `ToolSet` (and so any `TextEnv`) takes it
beside plain typed functions: argument checking, output truncation and error observations work the
same. Its `call` raises `ToolError` for the tool's own failures (an observation for the model) and
`RemoteEnvError` for the server's (a world failure recorded on the episode).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from envs.errors import ToolError

_JSON_TYPES = {"string", "integer", "number", "boolean", "array", "object", "null"}


def openai_schema(name: str, description: str | None,
                  input_schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """The OpenAI function schema of an MCP tool (`name`, `description`, `inputSchema`).

    MCP input schemas are JSON Schema objects; the chat template wants `{"type": "function",
    "function": {"name", "description", "parameters": {"type": "object", "properties", "required"}}}`.
    A missing description becomes the name; an untyped property becomes a string.
    """
    params = copy.deepcopy(dict(input_schema or {}))
    given = params.get("properties") or {}
    properties = {k: dict(v) if isinstance(v, Mapping) else {} for k, v in given.items()}
    for prop in properties.values():
        kind = prop.get("type")
        if isinstance(kind, list):  # ["string", "null"]: the checker and templates want one type
            prop["type"], prop["nullable"] = next((k for k in kind if k != "null"), "string"), "null" in kind
        elif kind not in _JSON_TYPES and "anyOf" not in prop:
            prop["type"] = "string"
    required = [r for r in params.get("required") or [] if r in properties]
    parameters = {**params, "type": "object", "properties": properties, "required": required}
    return {"type": "function", "function": {"name": name, "description": (description or "").strip() or name,
                                             "parameters": parameters}}


@dataclass(frozen=True)
class RemoteTool:
    """One tool served elsewhere: calling it with keyword arguments runs it there.

    Args:
        name: The tool name the model calls.
        openai_schema: Its OpenAI function schema (see `openai_schema`).
        call: `(name, arguments) -> text`; raises `ToolError` or `RemoteEnvError`.
    """

    name: str
    openai_schema: dict[str, Any]
    call: Callable[[str, dict[str, Any]], str] = field(repr=False)

    @property
    def __name__(self) -> str:  # noqa: D401 - ToolSet and function_schema read it like a function's
        return self.name

    def __call__(self, **arguments: Any) -> str:
        """Run the tool remotely: `call(name, arguments)`."""
        return self.call(self.name, arguments)


def content_text(blocks: Any) -> str:
    """The text of MCP content blocks (dicts or SDK objects): text joined by newlines, others as JSON."""
    parts = []
    for block in blocks or []:
        data = block if isinstance(block, Mapping) else getattr(block, "__dict__", {})
        if data.get("type") == "text":
            parts.append(str(data.get("text", "")))
        else:
            kind = data.get("type", type(block).__name__)
            parts.append(f"[{kind} content: {json.dumps(data, default=str)[:200]}]")
    return "\n".join(parts)


def tool_result_text(result: Any, tool: str) -> str:
    """The observation of one MCP `tools/call` result; `isError` results raise `ToolError`.

    Accepts the SDK's `CallToolResult` or its JSON form (`content`, `isError` / `is_error`).
    """
    data = result if isinstance(result, Mapping) else {"content": getattr(result, "content", None),
                                                       "isError": getattr(result, "isError", False)}
    text = content_text(data.get("content"))
    if data.get("isError") or data.get("is_error"):
        raise ToolError(text or f"Error: tool {tool!r} failed", kind="tool_error")
    return text or "(no output)"


__all__ = ["RemoteTool", "content_text", "openai_schema", "tool_result_text"]

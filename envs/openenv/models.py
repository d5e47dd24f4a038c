"""The wire types of a served STARE env, as OpenEnv `Action` / `Observation` models.

One action class carries the three OpenEnv action kinds, told apart by `type` (OpenEnv's own MCP
discriminator values), so every OpenEnv client reaches every kind through `step`:

- `{"type": "message", "content": TEXT}`: one whole assistant turn, exactly `TextEnv.step(TEXT)`:
  its tool calls are parsed and run server-side, or, without calls, it is graded (reward, done).
- `{"type": "call_tool", "tool_name", "arguments"}`: one MCP `tools/call` (one tool turn).
- `{"type": "list_tools"}`: MCP `tools/list`.
"""

from __future__ import annotations

from typing import Any, Literal

from openenv.core.env_server.types import Action, Observation
from pydantic import Field


class StareAction(Action):
    """One action on a served STARE env (see the module docstring for the three kinds)."""

    type: Literal["message", "call_tool", "list_tools"] = Field(
        default="message", description="message (an assistant turn), call_tool or list_tools")
    content: str = Field(default="", description="message: the assistant turn's text")
    tool_name: str = Field(default="", description="call_tool: the tool to call")
    arguments: dict[str, Any] = Field(default_factory=dict, description="call_tool: the tool's arguments")


class StareObservation(Observation):
    """What reset and a `message` step return: new chat messages, tool schemas, the env's info dict."""

    messages: list[dict[str, Any]] = Field(
        default_factory=list, description="new chat messages to append (reset: system and user prompt)")
    tool_schemas: list[dict[str, Any]] = Field(
        default_factory=list, description="reset only: the OpenAI function schemas of the env's tools")
    truncated: bool = Field(default=False, description="the episode was cut by the tool-turn budget")
    info: dict[str, Any] = Field(
        default_factory=dict, description="the env's info: tool_calls, tool_errors, grade on the final step")


__all__ = ["StareAction", "StareObservation"]

"""Serve any registered env as an OpenEnv server (`stare envs serve ID`), built on OpenEnv's own server.

`create_app(env_id)` is `openenv.core.env_server.create_fastapi_app` over `ServedEnv`, an OpenEnv
`MCPEnvironment` holding one `TextEnv` per session. So the wire is OpenEnv's: `WS /ws` (reset / step /
state / close, one session per connection), `POST /reset` and `/step` (stateless), `GET /health`,
`/schema`, `/metadata`, and the MCP surface `POST /mcp` / `WS /mcp` (JSON-RPC `tools/list`,
`tools/call`, `openenv/session/create|close`). Actions are `StareAction` (models.py); rewards and
grades are computed server-side by the env.

A `call_tool` is one tool turn of the env (same budget, output cut and error observations as a
`<tool_call>` in a `message`); a call after the budget ends the episode as truncated.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import ipaddress
import threading
from collections.abc import Callable
from typing import Any
from uuid import uuid4

from fastmcp import FastMCP
from fastmcp.tools import Tool as FastMCPTool
from fastmcp.tools.base import ToolResult
from mcp.types import TextContent
from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import (
    CallToolAction,
    CallToolObservation,
    ListToolsAction,
    ListToolsObservation,
)
from openenv.core.env_server.mcp_types import Tool as OpenEnvTool
from openenv.core.env_server.types import EnvironmentMetadata, State
from pydantic import ConfigDict

from envs.core import StepResult, TextEnv
from envs.openenv.models import StareAction, StareObservation
from envs.registry import card_summary, make
from envs.tools import ToolCall
from tasks.task import Task


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses (serving there needs no token)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_TEXT_RESULT = {"type": "object", "properties": {"result": {"type": "string"}}, "required": ["result"],
                "x-fastmcp-wrap-result": True}
"""Output schema of every served tool: the observation text (MCP clients read it as the call's `data`)."""


class _SessionTool(FastMCPTool):
    """One env tool on the session's FastMCP server: `tools/call` runs it as one tool turn."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    served: Any = None

    async def run(self, arguments: dict[str, Any]) -> ToolResult:
        result = await asyncio.to_thread(self.served.call_tool, self.name, arguments)
        text = _result_text(result)
        return ToolResult(content=[TextContent(type="text", text=text)], structured_content={"result": text},
                          is_error=bool(result.info["tool_errors"]))


def _result_text(result: StepResult) -> str:
    """The tool messages' text, or a note that the call ended the episode (past the turn budget)."""
    ended = f"Error: the episode has ended ({result.info.get('truncated_reason', 'done')}); call reset."
    return "\n".join(m["content"] for m in result.messages) or ended


def _call_payload(result: StepResult) -> dict[str, Any]:
    """A step result as the JSON form of an MCP `CallToolResult` (what OpenEnv clients read)."""
    text = _result_text(result)
    return {"content": [{"type": "text", "text": text}], "structured_content": None, "data": text,
            "is_error": bool(result.info["tool_errors"])}


class ServedEnv(MCPEnvironment):
    """One OpenEnv session over one `TextEnv` (made by `make_env`); its tools are the MCP tools."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, make_env: Callable[[], Any]) -> None:
        self.env = make_env()
        self.text_env: TextEnv = self.env.unwrapped
        if not isinstance(self.text_env, TextEnv):
            raise TypeError(f"only TextEnv environments can be served, got {type(self.text_env).__name__}")
        server = FastMCP("stare")
        for schema in self.text_env.tools.schemas:
            fn = schema["function"]
            server.add_tool(_SessionTool(name=fn["name"], description=fn["description"],
                                         parameters=fn["parameters"], output_schema=_TEXT_RESULT,
                                         served=self))
        super().__init__(server)
        self._lock = threading.Lock()
        self._state = State(episode_id=None, step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None,
              task: dict[str, Any] | None = None, task_id: str | None = None,
              **kwargs: Any) -> StareObservation:
        """Start an episode on `task` (a `Task.to_dict()` record), on dataset task `task_id`, or drawn."""
        chosen = self._task(task, task_id)
        with self._lock:
            messages, info = self.env.reset(seed=seed, options={"task": chosen} if chosen else None)
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        tools = info.pop("tools", [])
        return StareObservation(messages=messages, tool_schemas=tools, info=info, done=False, reward=0.0)

    def _task(self, task: dict[str, Any] | None, task_id: str | None) -> Task | None:
        if task is not None:
            return Task(**task) if isinstance(task, dict) else _bad("task", "a Task.to_dict() record")
        if task_id is None:
            return None
        found = next((t for t in self.text_env.tasks() if t.id == task_id), None)
        return found or _bad("task_id", f"the id of a task in the env's dataset (no task {task_id!r})")

    def call_tool(self, name: str, arguments: dict[str, Any]) -> StepResult:
        """Run one tool call as one tool turn of the current episode."""
        with self._lock:
            self._state.step_count += 1
            return self.text_env.step_calls([ToolCall(name, dict(arguments))])

    def step(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Any:
        """Dispatch on the action kind: list_tools, call_tool, or a message (a whole assistant turn)."""
        if isinstance(action, StareAction) and action.type != "message":
            action = (ListToolsAction() if action.type == "list_tools"
                      else CallToolAction(tool_name=action.tool_name, arguments=action.arguments))
        if isinstance(action, ListToolsAction):
            return ListToolsObservation(tools=[
                OpenEnvTool(name=s["function"]["name"], description=s["function"]["description"],
                            input_schema=s["function"]["parameters"]) for s in self.text_env.tools.schemas])
        if isinstance(action, CallToolAction):
            result = self.call_tool(action.tool_name, action.arguments)
            return CallToolObservation(tool_name=action.tool_name, result=_call_payload(result),
                                       done=result.terminated or result.truncated, reward=result.reward,
                                       metadata={"info": result.info})
        return self._step_impl(action)

    async def step_async(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Any:
        """`step` on a worker thread (the env's tools block: they run code)."""
        return await asyncio.to_thread(self.step, action)

    def _step_impl(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> StareObservation:
        with self._lock:
            self._state.step_count += 1
            messages, reward, terminated, truncated, info = self.env.step(action.content)
        return StareObservation(messages=messages, info=info, truncated=truncated,
                                done=terminated or truncated, reward=reward)

    @property
    def state(self) -> State:
        """The OpenEnv session state: episode id and step count."""
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        """Name and env card line of the served env."""
        env_id = self.env.spec.id if self.env.spec else type(self.text_env).__name__
        return EnvironmentMetadata(name=env_id, description=card_summary(env_id) if self.env.spec else "",
                                   version="1")

    def close(self) -> None:
        """End the episode and release the env (its sandbox session)."""
        self.env.close()
        super().close()


def _bad(field: str, want: str) -> Any:
    raise ValueError(f"reset field {field!r} must be {want}")


class TokenGate:
    """ASGI middleware: every request and WebSocket but `/health` needs `Authorization: Bearer TOKEN`."""

    def __init__(self, app: Any, token: str) -> None:
        self.app, self._token = app, token.encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Pass authorised requests on; answer others with 401 (HTTP) or close code 1008 (WebSocket)."""
        open_path = scope.get("path") == "/health"
        if scope["type"] not in ("http", "websocket") or open_path or self._allowed(scope):
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": "missing or wrong bearer token"})
        else:
            headers = [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]
            await send({"type": "http.response.start", "status": 401, "headers": headers})
            await send({"type": "http.response.body", "body": b'{"detail": "missing or wrong bearer token"}'})

    def _allowed(self, scope: dict[str, Any]) -> bool:
        header = dict(scope.get("headers") or []).get(b"authorization", b"")
        return hmac.compare_digest(header, b"Bearer " + self._token)


def create_app(env_id: str, *, env_kwargs: dict[str, Any] | None = None, max_sessions: int = 64,
               token: str | None = None) -> Any:
    """The OpenEnv FastAPI app serving `env_id` (one env instance per session).

    Args:
        env_id: A registered id, e.g. "stare/PythonTool-v0".
        env_kwargs: Keyword arguments of `envs.make` for every session's env.
        max_sessions: Concurrent sessions (WebSocket connections / MCP sessions) at most.
        token: When set, requests must send `Authorization: Bearer TOKEN` (all but `/health`).
    """
    make(env_id, **(env_kwargs or {})).close()  # a bad id or argument fails here, not per session
    factory = functools.partial(ServedEnv, functools.partial(make, env_id, **(env_kwargs or {})))
    app = create_fastapi_app(factory, StareAction, StareObservation, max_concurrent_envs=max_sessions,
                             env_name=env_id.replace("/", "_"), mode="simulation")
    if token:
        app.add_middleware(TokenGate, token=token)
    return app


__all__ = ["ServedEnv", "TokenGate", "create_app", "is_loopback"]

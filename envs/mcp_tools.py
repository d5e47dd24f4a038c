"""MCP servers as a tool source of any `TextEnv`, through the official `mcp` SDK (stdio or streamable HTTP).

    server = MCPToolServer(["python", "my_tools.py"])          # stdio: a command line
    server = MCPToolServer("http://127.0.0.1:8000/mcp")        # streamable HTTP
    env = TextEnv(dataset="arith-tool-train", tools=server.tools())

`tools()` is the server's `tools/list` as `RemoteTool`s (OpenAI schemas for the chat template); calling
one is a `tools/call`. A result with `isError` or a JSON-RPC error reply becomes a tool-error observation
(the model's business); a server that cannot be reached, stops answering within `timeout`, closes, or
sends more than `max_message_mb` raises `RemoteEnvError` naming the server and the call (a world
failure recorded on the episode). The session is held open on one background event loop, shared by
every env using the tools (MCP multiplexes concurrent calls); `close()` ends it (and a stdio process).
"""

from __future__ import annotations

import asyncio
import shlex
import tempfile
import threading
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import timedelta
from typing import Any

from mcp import ClientSession, McpError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamablehttp_client
from mcp.types import CONNECTION_CLOSED

from envs.errors import RemoteEnvError, ToolError
from envs.remote import RemoteTool, openai_schema, tool_result_text


class MCPToolServer:
    """One open MCP client session (stdio or streamable HTTP) and its tools.

    Args:
        server: An http(s) URL (streamable HTTP endpoint, usually ending in "/mcp"), or a command line
            (a list, or a string split like a shell) started as a stdio server.
        headers: HTTP headers for streamable HTTP (e.g. `{"Authorization": "Bearer ..."}`).
        env: Environment variables of a stdio server process (default: the SDK's safe subset).
        timeout: Seconds to wait for each reply (`tools/list`, `tools/call`).
        connect_timeout: Seconds to start the process or reach the URL and finish the MCP handshake.
        max_message_mb: Largest tool result accepted (its text), in MB.
    """

    def __init__(self, server: str | Sequence[str], *, headers: dict[str, str] | None = None,
                 env: dict[str, str] | None = None, timeout: float = 30.0, connect_timeout: float = 10.0,
                 max_message_mb: float = 16.0) -> None:
        if timeout <= 0 or connect_timeout <= 0 or max_message_mb <= 0:
            raise ValueError("timeout, connect_timeout and max_message_mb must be > 0")
        self._stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # a stdio server's
        self._transport = self._open_transport(server, headers, env, timeout, self._stderr)
        self.name = server if isinstance(server, str) else shlex.join(server)
        self.timeout, self.max_chars = timeout, int(max_message_mb * 1024 * 1024)
        self._loop = asyncio.new_event_loop()
        self._ready, self._failure = threading.Event(), None
        self._stop: asyncio.Event | None = None
        self._session: ClientSession | None = None
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._main(),),
                                        daemon=True, name="mcp-client")
        self._thread.start()
        if not self._ready.wait(connect_timeout):
            self.close()
            raise RemoteEnvError(f"MCP server {self.name}: connect got no handshake within "
                                 f"{connect_timeout:g} s{self._stderr_tail()}")
        if self._failure is not None:
            raise RemoteEnvError(f"MCP server {self.name}: connect failed: {_describe(self._failure)}"
                                 f"{self._stderr_tail()}") from self._failure

    def _stderr_tail(self, lines: int = 5) -> str:
        """The last lines a stdio server wrote to stderr, for error messages ("" when none)."""
        self._stderr.flush()
        self._stderr.seek(0)
        tail = [line.rstrip() for line in self._stderr.read().splitlines() if line.strip()][-lines:]
        return "; its stderr ends: " + " | ".join(tail) if tail else ""

    @staticmethod
    def _open_transport(server: str | Sequence[str], headers: dict[str, str] | None,
                        env: dict[str, str] | None, timeout: float, stderr: Any) -> Callable[[], Any]:
        """A factory of the SDK transport context for `server` (validated now, opened on the loop)."""
        if isinstance(server, str) and server.startswith(("http://", "https://")):
            return lambda: streamablehttp_client(server, headers=headers, timeout=timeout)
        argv = shlex.split(server) if isinstance(server, str) else list(server)
        if not argv:
            raise ValueError("server must be an http(s) URL or the non-empty command line of a stdio server")
        params = StdioServerParameters(command=argv[0], args=argv[1:], env=env)
        return lambda: stdio_client(params, errlog=stderr)

    async def _main(self) -> None:
        """Open the transport and session, then hold them until `close()`."""
        self._stop = asyncio.Event()
        try:
            async with self._transport() as streams, ClientSession(streams[0], streams[1]) as session:
                await session.initialize()
                self._session = session
                self._ready.set()
                await self._stop.wait()
        except BaseException as err:  # noqa: BLE001 - reported to the caller of connect or of the next call
            self._failure = err
        finally:
            self._session = None
            self._ready.set()

    def _run(self, call: str, make: Callable[[ClientSession], Awaitable[Any]]) -> Any:
        """Run one request on the session's loop, bounded by `timeout`; failures name server and call."""
        session = self._session
        if session is None:
            why = _describe(self._failure) if self._failure else "the session is closed"
            raise RemoteEnvError(f"MCP server {self.name}: {call} failed: {why}")
        future = asyncio.run_coroutine_threadsafe(make(session), self._loop)
        try:
            return future.result(timeout=self.timeout + 1.0)
        except (FutureTimeout, TimeoutError) as err:
            future.cancel()
            why = f"got no reply within {self.timeout:g} s"
            raise RemoteEnvError(f"MCP server {self.name}: {call} {why}") from err
        except McpError as err:
            if "timed out" in err.error.message.lower():  # the SDK's own read timeout
                raise RemoteEnvError(f"MCP server {self.name}: {call} got no reply within {self.timeout:g} s "
                                     f"({err.error.message})") from err
            if err.error.code == CONNECTION_CLOSED:
                raise RemoteEnvError(f"MCP server {self.name}: {call} failed: {err.error.message}") from err
            raise ToolError(f"Error: {err.error.message}", kind="mcp_error") from err
        except Exception as err:  # transport faults (closed streams, HTTP errors)
            raise RemoteEnvError(f"MCP server {self.name}: {call} failed: {_describe(err)}") from err

    def tools(self) -> list[RemoteTool]:
        """The server's tools (`tools/list`) as `TextEnv` tools."""
        try:
            listed = self._run("tools/list", lambda s: s.list_tools())
        except ToolError as err:
            raise RemoteEnvError(f"MCP server {self.name}: tools/list failed: {err}") from err
        return [RemoteTool(t.name, openai_schema(t.name, t.description, t.inputSchema), self.call)
                for t in listed.tools]

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        """`tools/call`: the result text; `isError` raises `ToolError`, a transport fault `RemoteEnvError`."""
        limit = timedelta(seconds=self.timeout)
        result = self._run(f"tools/call {name!r}",
                           lambda s: s.call_tool(name, arguments, read_timeout_seconds=limit))
        text = tool_result_text(result, name)
        if len(text) > self.max_chars:
            raise RemoteEnvError(f"MCP server {self.name}: tools/call {name!r} failed: the result has "
                                 f"{len(text)} characters, over max_message_mb={self.max_chars / 2 ** 20:g}")
        return text

    def close(self) -> None:
        """End the session (and the stdio process); safe to call more than once."""
        if self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(timeout=10)
        self._stderr.close()

    def __enter__(self) -> MCPToolServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _describe(err: BaseException) -> str:
    """One line for an exception, unwrapping anyio's exception groups to their first cause."""
    while getattr(err, "exceptions", None):  # BaseExceptionGroup (3.11+, or anyio's backport on 3.10)
        err = err.exceptions[0]
    return f"{type(err).__name__}: {err}"


__all__ = ["MCPToolServer"]

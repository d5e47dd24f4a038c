"""MCP servers as a TextEnv tool source: a real FastMCP server (official SDK) over stdio and over streamable
HTTP on 127.0.0.1, started by the tests (one of each per module)."""

from __future__ import annotations

import json
import pathlib
import runpy
import sys
import time

import pytest

pytest.importorskip("mcp")

import envs  # noqa: E402
from envs.core import TextEnv  # noqa: E402
from envs.mcp_tools import MCPToolServer  # noqa: E402
from envs.serving import serve_app_in_background as serve_in_background  # noqa: E402
from tasks.task import Task  # noqa: E402

SERVER = pathlib.Path(__file__).parent / "data" / "mcp_server.py"
TASK = Task("t", "What is 2 + 3?", "5", "tool")


def call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


@pytest.fixture(scope="module")
def stdio_server():
    with MCPToolServer([sys.executable, str(SERVER)], timeout=1.0, connect_timeout=30) as server:
        yield server


@pytest.fixture(scope="module")
def http_url():
    app = runpy.run_path(str(SERVER))["mcp"].streamable_http_app()
    with serve_in_background(app) as url:
        yield f"{url}/mcp"


def test_stdio_tools_drive_a_text_env_episode(stdio_server):
    env = TextEnv(dataset=[TASK], tools=stdio_server.tools(), max_output_chars=64)
    _, info = env.reset()
    schemas = {s["function"]["name"]: s["function"] for s in info["tools"]}
    assert sorted(schemas) == ["add", "divide", "nap", "shout"]
    assert schemas["shout"]["parameters"]["required"] == ["text"]  # `times` has a default
    assert schemas["add"]["description"] == "Add two integers."
    assert env.step(call("add", a=2, b=3)).messages[0]["content"] == "5"
    error = env.step(call("divide", a=1, b=0))  # the tool raised: an observation, not an exception
    assert error.info["error_kinds"] == ["tool_error"] and "division by zero" in error.messages[0]["content"]
    bad = env.step(call("add", a="two", b=3))  # checked against the listed schema before any call
    assert bad.info["error_kinds"] == ["bad_arguments"]
    cut = env.step(call("shout", text="ab", times=100)).messages[0]["content"]
    assert len(cut) <= 64 and "characters omitted" in cut  # the env's output budget applies
    final = env.step("\\boxed{5}")
    assert (final.reward, final.terminated) == (1.0, True)
    assert "malformed_actions" in envs.check_env(env)


def test_streamable_http_tools_and_a_server_side_error(http_url):
    with MCPToolServer(http_url, timeout=5) as server:
        tools = {t.name: t for t in server.tools()}
        assert tools["shout"](text="hi", times=2) == "HIHI"
        with pytest.raises(envs.ToolError, match="division by zero"):
            tools["divide"](a=1, b=0)
        with pytest.raises(envs.ToolError, match="Unknown tool"):  # a server-side error reply
            server.call("no_such_tool", {})


def test_timeouts_and_dead_servers_are_world_failures(stdio_server, tmp_path):
    env = TextEnv(dataset=[TASK], tools=stdio_server.tools())
    env.reset()
    start = time.monotonic()
    with pytest.raises(envs.RemoteEnvError, match=r"tools/call 'nap' got no reply within 1 s"):
        env.step(call("nap", seconds=1.5))
    assert time.monotonic() - start < 3
    time.sleep(1.0)  # the server finishes its nap before the next test uses it
    with pytest.raises(envs.RemoteEnvError, match="connect failed"):
        MCPToolServer([sys.executable, "-c", "import sys; sys.exit(3)"], connect_timeout=20)
    with pytest.raises(envs.RemoteEnvError, match=r"127.0.0.1:9/mcp: connect"):
        MCPToolServer("http://127.0.0.1:9/mcp", connect_timeout=5)
    closed = MCPToolServer([sys.executable, str(SERVER)], connect_timeout=30)
    tool = closed.tools()[0]
    closed.close()
    with pytest.raises(envs.RemoteEnvError, match="session is closed"):
        tool(a=1, b=2)
    with pytest.raises(ValueError, match="non-empty command line"):
        MCPToolServer([])

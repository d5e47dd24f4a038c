"""OpenEnv both ways, on 127.0.0.1: our served env driven by the `openenv` package's own clients, and a
server written with the `openenv` package's helpers consumed as a `TextEnv` (one server per module)."""

from __future__ import annotations

import json
import sys
import time

import pytest

pytest.importorskip("openenv")

from fastmcp import FastMCP  # noqa: E402
from openenv.core.env_server.http_server import create_fastapi_app  # noqa: E402
from openenv.core.env_server.mcp_environment import MCPEnvironment  # noqa: E402
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation  # noqa: E402
from openenv.core.env_server.types import Observation, State  # noqa: E402
from openenv.core.generic_client import GenericEnvClient  # noqa: E402
from openenv.core.mcp_client import MCPToolClient  # noqa: E402

import envs  # noqa: E402
from envs.openenv.models import StareAction  # noqa: E402
from envs.openenv.server import create_app  # noqa: E402
from envs.serving import serve_app_in_background as serve_in_background  # noqa: E402
from tasks.task import Task  # noqa: E402
from tests.envs.conftest import FakeSandbox  # noqa: E402

TASK = Task("t1", "What is 6 * 7?", "42", "tool")


def call(code: str) -> str:
    return f"<tool_call>{json.dumps({'name': 'code_interpreter', 'arguments': {'code': code}})}</tool_call>"


def tool_action(code: str) -> dict:
    return {"type": "call_tool", "tool_name": "code_interpreter", "arguments": {"code": code}}


class CounterEnv(MCPEnvironment):
    """Written the OpenEnv way: FastMCP tools, reward and done set in step. Reach 10 to win (reward 1)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        server = FastMCP("counter")
        self.total = 0

        @server.tool
        def add(n: int) -> str:
            """Add n to the counter and return the new total."""
            self.total += n
            return f"total={self.total}"

        @server.tool
        def fail() -> str:
            """Always raises."""
            raise ValueError("boom")

        @server.tool
        def big(n: int) -> str:
            """Return n characters."""
            return "x" * n

        @server.tool
        def slow(seconds: float) -> str:
            """Sleep, then answer."""
            time.sleep(seconds)
            return "late"

        super().__init__(server)
        self._state = State(episode_id=None, step_count=0)

    def reset(self, seed=None, episode_id=None, **kwargs):
        self.total = 0
        return Observation(done=False, reward=0.0, metadata={"prompt": "Make the counter reach 10 with add."})

    async def step_async(self, action, timeout_s=None, **kwargs):
        observation = await super().step_async(action, timeout_s=timeout_s, **kwargs)
        if isinstance(action, CallToolAction) and isinstance(observation, CallToolObservation):
            observation.done, observation.reward = self.total >= 10, 1.0 if self.total == 10 else 0.0
        return observation

    def _step_impl(self, action, timeout_s=None, **kwargs):
        return Observation(done=False, reward=0.0, metadata={"error": "unknown action"})

    @property
    def state(self):
        return self._state


@pytest.fixture(scope="module")
def stare_url():
    with serve_in_background(create_app("stare/PythonTool-v0", env_kwargs={"sandbox": FakeSandbox()})) as url:
        yield url


@pytest.fixture(scope="module")
def counter_url():
    app = create_fastapi_app(CounterEnv, CallToolAction, CallToolObservation, max_concurrent_envs=8)
    with serve_in_background(app) as url:
        yield url


# ---- serve: the openenv package's clients against `stare/PythonTool-v0` ---------------------------
def test_mcp_tool_client_plays_a_full_tool_episode(stare_url):
    with MCPToolClient(base_url=stare_url, message_timeout_s=20).sync() as client:
        first = client.reset(task=TASK.to_dict())
        assert first.observation.messages[-1]["content"].startswith("What is 6 * 7?")
        assert [t.name for t in client.list_tools()] == ["code_interpreter"]
        assert client.call_tool("code_interpreter", code="x = 6 * 7") == "(no output)"
        assert client.call_tool("code_interpreter", code="print(x)") == "42"  # per-session state
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):  # MCP isError reaches the client
            client.call_tool("code_interpreter", code="1/0")
        final = client.step(StareAction(content="The answer is \\boxed{42}."))
    assert (final.done, final.reward) == (True, 1.0)  # graded server-side
    assert final.observation.info["grade"] == {"status": "correct", "prediction": "42", "correct": True}
    assert final.observation.info["tool_turns"] == 3


def test_generic_client_sees_rewards_budget_and_separate_sessions(stare_url):
    with GenericEnvClient(base_url=stare_url).sync() as a, GenericEnvClient(base_url=stare_url).sync() as b:
        a.reset(task=TASK.to_dict())
        b.reset(task=TASK.to_dict())
        a.step(tool_action("y = 1"))
        seen = b.step(tool_action("print(y)"))
        assert "NameError" in seen.observation["result"]["data"]  # b's interpreter is not a's
        turn = a.step({"type": "message", "content": call("print(y + 1)")})  # one whole turn, parsed there
        assert turn.observation["messages"][0]["content"] == "2" and turn.done is False
        wrong = a.step({"type": "message", "content": "\\boxed{41}"})
        assert (wrong.done, wrong.reward) == (True, 0.0)
        assert wrong.observation["info"]["grade"]["status"] == "wrong"


def test_call_after_the_turn_budget_truncates(stare_url):
    with GenericEnvClient(base_url=stare_url).sync() as client:
        client.reset(task=TASK.to_dict())
        steps = [client.step(tool_action("1")) for _ in range(9)]
    assert [s.done for s in steps] == [False] * 8 + [True]  # PythonTool's max_tool_turns is 8
    assert steps[-1].reward == 0.0 and steps[-1].observation["metadata"]["info"]["truncated_reason"]


def test_token_is_required_on_http_and_websocket():
    import httpx

    app = create_app("stare/PythonTool-v0", env_kwargs={"sandbox": FakeSandbox()}, token="s3cret")
    with serve_in_background(app) as url:
        assert httpx.post(f"{url}/reset", json={}).status_code == 401
        assert httpx.get(f"{url}/health").status_code == 200
        with pytest.raises(ConnectionError, match="403"):
            GenericEnvClient(base_url=url).sync().reset()
        env = envs.make(f"openenv/{url}", token="s3cret")
        assert env.reset(options={"task": TASK})[0][-1]["content"].startswith("What is 6 * 7?")
        env.close()


# ---- consume: envs.make("openenv/<url>") ----------------------------------------------------------
def test_consumed_stare_server_plays_and_passes_check_env(stare_url):
    env = envs.make(f"openenv/{stare_url}")
    messages, info = env.reset(options={"task": TASK})
    assert messages[-1]["content"].startswith("What is 6 * 7?")
    assert info["tools"][0]["function"]["name"] == "code_interpreter"
    tool = env.step(call("print(6 * 7)"))
    assert tool.messages == [{"role": "tool", "name": "code_interpreter", "content": "42",
                              "tool_call_id": "call_1_0"}]
    final = env.step("\\boxed{42}")
    assert (final.reward, final.terminated, final.info["grade"]["correct"]) == (1.0, True, True)
    assert "turn_budget" in envs.check_env(env)


def test_consumed_openenv_server_rewards_and_episode_end_flow_through(counter_url):
    env = envs.make(f"openenv/{counter_url}", timeout=5)
    messages, info = env.reset(seed=0)
    assert messages == [{"role": "user", "content": "Make the counter reach 10 with add."}]
    assert sorted(s["function"]["name"] for s in info["tools"]) == ["add", "big", "fail", "slow"]
    add = '<tool_call>{"name": "add", "arguments": {"n": %d}}</tool_call>'
    first = env.step(add % 4)
    assert (first.messages[0]["content"], first.reward, first.terminated) == ("total=4", 0.0, False)
    failed = env.step('<tool_call>{"name": "fail", "arguments": {}}</tool_call>')
    assert failed.info["tool_errors"] == 1 and "boom" in failed.messages[0]["content"]
    bad = env.step('<tool_call>{"name": "add", "arguments": {"n": "six"}}</tool_call>')  # checked locally
    assert bad.info["error_kinds"] == ["bad_arguments"]
    last = env.step(add % 6)
    assert (last.messages[0]["content"], last.reward, last.terminated) == ("total=10", 1.0, True)
    assert last.info["grade"]["correct"] is True
    with pytest.raises(envs.ResetNeeded):
        env.step(add % 1)
    assert "malformed_actions" in envs.check_env(env)


def test_remote_failures_are_clear_episode_errors(counter_url):
    env = envs.make(f"openenv/{counter_url}", timeout=0.5, max_message_mb=0.01)
    env.reset()
    with pytest.raises(envs.RemoteEnvError, match=r"no reply within 0.5 s") as slow:
        env.step('<tool_call>{"name": "slow", "arguments": {"seconds": 2}}</tool_call>')
    assert counter_url in str(slow.value) and "call_tool 'slow'" in str(slow.value)
    assert isinstance(slow.value, envs.EpisodeError)  # a world failure, like a sandbox failure
    time.sleep(1.6)  # let the slow call finish server-side before the next session
    env.reset()
    with pytest.raises(envs.RemoteEnvError, match="larger than max_message_mb=0.01"):
        env.step('<tool_call>{"name": "big", "arguments": {"n": 50000}}</tool_call>')
    env.close()
    with pytest.raises(envs.RemoteEnvError, match=r"127.0.0.1:9: reset is unreachable"):
        envs.make("openenv/http://127.0.0.1:9", connect_timeout=2).reset()
    with pytest.raises(ValueError, match="base_url must be"):
        envs.make("openenv/localhost:8000")


def test_a_failing_remote_env_is_a_world_failure_on_the_episode(counter_url):
    from agents import RolloutLimits, ScriptedPolicy, rollout
    from tests.agents.conftest import build_tokenizer

    tokenizer = build_tokenizer()
    env = envs.make(f"openenv/{counter_url}", timeout=0.5)
    slow = '<tool_call>{"name": "slow", "arguments": {"seconds": 1.5}}</tool_call>'
    policy = ScriptedPolicy([slow], tokenizer)
    traj = rollout(env, policy, tokenizer, limits=RolloutLimits(max_response_tokens=256))
    assert traj.finish_reason == "error"  # recorded like a sandbox failure, not raised
    assert traj.failed.startswith("RemoteEnvError: ") and "got no reply within 0.5 s" in traj.failed
    time.sleep(1.2)  # the server finishes the call before the module's server shuts down


# ---- the command: `stare envs serve` ---------------------------------------------------------------
def test_serve_refuses_a_public_host_without_a_token():
    from typer.testing import CliRunner

    from training.commands.envs import app

    result = CliRunner().invoke(app, ["serve", "stare/PythonTool-v0", "--host", "0.0.0.0"])
    assert result.exit_code == 2 and "pass --token" in result.output


def test_stare_envs_serve_plays_a_real_sandbox_episode(tmp_path):
    import os
    import socket
    import subprocess

    import httpx

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    command = [sys.executable, "-c", "from training.cli import main; main()", "envs", "serve",
               "stare/PythonTool-v0", "--port", str(port), "--token", "t0k", "--env-arg", "timeout=5",
               "--env-arg", "memory_mb=256"]
    log = open(tmp_path / "serve.log", "w")
    server = subprocess.Popen(command, cwd=repo, stdout=log, stderr=subprocess.STDOUT,
                              env={**os.environ, "PYTHONPATH": repo})
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):  # up to 60 s for the import and the sandbox warm-up
            if server.poll() is not None:
                break
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        if server.poll() is not None:
            text = (tmp_path / "serve.log").read_text()
            if "isolation" in text.lower() or "bubblewrap" in text.lower():
                pytest.skip(f"no local sandbox here: {text[-300:]}")
            raise AssertionError(f"stare envs serve exited: {text[-2000:]}")
        with MCPToolClient(base_url=url, headers={"Authorization": "Bearer t0k"}).sync() as client:
            client.reset(task=TASK.to_dict())
            assert client.call_tool("code_interpreter", code="import math\nprint(math.prod([6, 7]))") == "42"
            final = client.step(StareAction(content="\\boxed{42}"))
        assert (final.done, final.reward) == (True, 1.0)
    finally:
        server.terminate()
        server.wait(timeout=20)
        log.close()


def test_env_args_parse_as_json_or_stay_strings():
    from training.commands.envs import _env_kwargs

    assert _env_kwargs(["timeout=5", "dataset=countdown-train", "persistent=false"]) == {
        "timeout": 5, "dataset": "countdown-train", "persistent": False}
    with pytest.raises(Exception, match="KEY=VALUE"):
        _env_kwargs(["timeout"])

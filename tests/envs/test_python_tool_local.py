"""PythonTool-v0 on the real shared LocalSandbox: one scripted episode through every outcome kind."""

from __future__ import annotations

import json

import pytest

import envs
from tasks.task import Task


def code(src: str) -> str:
    body = json.dumps({"name": "code_interpreter", "arguments": {"code": src}})
    return f"<tool_call>{body}</tool_call>"


@pytest.fixture(scope="module")
def env():
    try:
        from envs.sandbox import shared_local_sandbox

        shared_local_sandbox()
    except Exception as err:  # e.g. no bubblewrap on this machine
        pytest.skip(f"LocalSandbox unavailable: {err}")
    env = envs.make("stare/PythonTool-v0", timeout=2.0, memory_mb=256, max_output_chars=200)
    yield env
    env.close()


def test_scripted_episode_on_the_local_sandbox(env):
    env.reset(options={"task": Task("p", "What is 17 * 23?", "391", "tool")})
    script = [
        (code("x = 17 * 23"), "(no output)", []),
        (code("print(x)"), "391", []),  # the session keeps state
        (code("1/0"), "    1/0\nZeroDivisionError: division by zero", ["code_error"]),
        (code("print('y' * 1000)"), None, []),
        (code("while True: pass"), "TimeoutError: the code ran longer than 2 s and was stopped.",
         ["timeout"]),
    ]
    for action, expected, kinds in script:
        result = env.step(action)
        content = result.messages[0]["content"]
        assert result.info["error_kinds"] == kinds, content
        if expected is None:
            assert len(content) <= 200 and "characters omitted" in content
        else:
            assert content.split("\n[sandbox]")[0] == expected
    final = env.step("The product is \\boxed{391}.")
    assert final.terminated and final.reward == 1.0
    assert env.unwrapped._session is None  # closed at episode end


def test_memory_limit_is_its_own_observation(env):
    env.reset(seed=0)
    result = env.step(code("a = bytearray(1024 * 1024 * 1024)"))
    assert result.info["error_kinds"] == ["memory_limit"]
    assert result.messages[0]["content"].startswith("MemoryError: the code used more than 256 MB")


@pytest.fixture(scope="module")
def fusion_url(env):
    """Our SandboxFusion-compatible server over the shared LocalSandbox, on a free local port."""
    from envs.sandbox import shared_local_sandbox
    from envs.sandbox.server import serve_in_background

    with serve_in_background(shared_local_sandbox()) as url:
        yield url


def test_sandboxfusion_endpoint_by_option(fusion_url):
    env = envs.make("stare/PythonTool-v0", sandbox=fusion_url, timeout=5.0)
    env.reset(options={"task": Task("p", "What is 17 * 23?", "391", "tool")})
    assert env.step(code("x = 17 * 23")).messages[0]["content"] == "(no output)"
    assert env.step(code("print(x)")).messages[0]["content"] == "391"
    assert env.step(code("1/0")).info["error_kinds"] == ["code_error"]
    assert env.step("\\boxed{391}").reward == 1.0
    env.close()


def test_stateless_mode_runs_each_call_fresh_and_holds_no_session(env):
    stateless = envs.make("stare/PythonTool-v0", timeout=2.0, memory_mb=256, persistent=False)
    try:
        stateless.reset(options={"task": Task("p", "What is 17 * 23?", "391", "tool")})
        first = stateless.step(code("x = 17 * 23\nprint(x)"))
        assert first.messages[0]["content"] == "391"
        session = stateless.unwrapped._session
        assert type(session).__name__ == "_StatelessSession"
        second = stateless.step(code("print(x)"))  # no state carried over
        assert "NameError" in second.messages[0]["content"]
        assert second.info["error_kinds"] == ["code_error"]
    finally:
        stateless.close()

"""Shared fixtures: small tasks and a fake sandbox implementing the session interface."""

from __future__ import annotations

import contextlib
import io
import json
import traceback

import pytest

from envs.sandbox.result import RunResult, RunStatus
from tasks.task import Task


class FakeSession:
    """Runs code with exec() in one namespace (state persists), like the real interpreter session."""

    def __init__(self, owner: FakeSandbox) -> None:
        self.owner, self.namespace, self.closed, self.calls = owner, {}, False, []

    def run(self, code: str, *, timeout: float, memory_mb: int, stdin: str) -> RunResult:
        assert not self.closed, "run() on a closed session"
        self.calls.append((code, timeout, memory_mb, stdin))
        if "while True" in code:
            return RunResult(RunStatus.TimeLimitExceeded, "", "", None, timeout)
        if "bytearray(10**12)" in code:
            return RunResult(RunStatus.MemoryLimitExceeded, "", "", None, 0.1)
        if "SANDBOX_DOWN" in code:
            return RunResult(RunStatus.SandboxError, "", "launcher failed", None, 0.0)
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                exec(code, self.namespace)
        except Exception:
            return RunResult(RunStatus.Finished, out.getvalue(), traceback.format_exc(), 1, 0.01)
        return RunResult(RunStatus.Finished, out.getvalue(), "", 0, 0.01)

    def close(self) -> None:
        self.closed = True


class FakeSandbox:
    """`session()` factory that records every session it opened."""

    def __init__(self) -> None:
        self.sessions: list[FakeSession] = []

    def session(self) -> FakeSession:
        self.sessions.append(FakeSession(self))
        return self.sessions[-1]


@pytest.fixture
def fake_sandbox() -> FakeSandbox:
    return FakeSandbox()


@pytest.fixture
def math_tasks() -> list[Task]:
    return [Task("m1", "What is 17 * 23?", "391", "tool"), Task("m2", "What is 2 + 3?", "5", "short_cot"),
            Task("m3", "Compute 12 * 12.", "144", "tool")]


@pytest.fixture
def tool_call():
    """`tool_call(name, **arguments)`: a Hermes tool call as an assistant would write it."""

    def make(tool: str, /, **arguments) -> str:
        return "<tool_call>" + json.dumps({"name": tool, "arguments": arguments}) + "</tool_call>"

    return make

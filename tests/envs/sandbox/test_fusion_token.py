"""`FusionSandbox` (and `stare/PythonTool-v0` with a URL) against a token-protected sandbox server.

The server runs on 127.0.0.1 with `token=` (what `stare sandbox serve --token` sets) around a fake
sandbox, so no bubblewrap is needed.
"""

from __future__ import annotations

import time

import pytest

import envs
from envs.sandbox import FusionSandbox, RunResult, RunStatus
from envs.sandbox.auth import TOKEN_ENV
from envs.sandbox.server import serve_in_background

TOKEN = "s3cret-Token_42"


class _Answers42:
    def run(self, code: str, **_: object) -> RunResult:
        return RunResult(status=RunStatus.Finished, stdout="42\n", stderr="", return_code=0, wall_time=0.0)


@pytest.fixture(scope="module")
def url():
    with serve_in_background(_Answers42(), token=TOKEN) as base:
        yield base


@pytest.fixture(autouse=True)
def no_token_in_env(monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)


def test_the_token_option_is_sent_and_accepted(url):
    with FusionSandbox(url, token=TOKEN) as fusion:
        result = fusion.run("print(6 * 7)")
        assert (result.status, result.stdout, result.return_code) == (RunStatus.Finished, "42\n", 0)
        with fusion.session() as session:                      # the emulated session, same header
            assert session.run("x = 1").stdout == "42\n"


@pytest.mark.parametrize("token", [None, "wrong-token"])
def test_a_missing_or_wrong_token_is_a_sandbox_error_at_once(url, token):
    with FusionSandbox(url, token=token, max_attempts=5, retry_wait_s=1.0) as fusion:
        start = time.monotonic()
        result = fusion.run("print(1)")
    assert result.status is RunStatus.SandboxError and "401" in result.stderr and "Bearer" in result.stderr
    assert time.monotonic() - start < 1.0                      # a 4xx is not retried


def test_the_token_is_read_from_the_environment_when_unset(url, monkeypatch):
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    with FusionSandbox(url) as fusion:
        assert fusion.run("print(6 * 7)").stdout == "42\n"
    with FusionSandbox(url, token="wrong-token") as fusion:     # the option wins over the variable
        assert "401" in fusion.run("print(1)").stderr


def test_python_tool_with_a_url_sends_the_token_from_the_environment(url, monkeypatch):
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    env = envs.make("stare/PythonTool-v0", dataset="countdown-train", sandbox=url)
    env.reset(seed=0)
    assert env.unwrapped.code_interpreter("print(6 * 7)") == "42"
    env.close()


@pytest.mark.parametrize(("token", "env_token", "named"), [("two words", None, "token"),
                                                            (None, "bad\ntoken", TOKEN_ENV)])
def test_a_token_that_cannot_be_a_header_is_refused_by_name(monkeypatch, token, env_token, named):
    if env_token is not None:
        monkeypatch.setenv(TOKEN_ENV, env_token)
    with pytest.raises(ValueError, match=named.replace("$", r"\$")):
        FusionSandbox("http://127.0.0.1:9", token=token)

"""The run owns its code sandbox: setup builds it, the env factory hands it to the envs, each rollout
call sizes it for the episodes it plays at once, and nothing process-wide is touched."""

from __future__ import annotations

import pytest

from envs.errors import SandboxUnavailable
from envs.sandbox import LazyLocalSandbox, RunResult, RunStatus
from envs.sandbox import local as local_module
from training import runtime
from training.trainer import setup


class RecordingSandbox:
    """A sandbox object that answers every run with "42" and records the code and the reservations."""

    def __init__(self) -> None:
        self.codes: list[str] = []
        self.reserved: list[int] = []

    def run(self, code: str, **kwargs: object) -> RunResult:
        self.codes.append(code)
        return RunResult(status=RunStatus.Finished, stdout="42\n", stderr="", return_code=0, wall_time=0.0)

    def reserve_sessions(self, n: int) -> int:
        self.reserved.append(n)
        return n


@pytest.fixture()
def no_shared_sandbox(monkeypatch):
    """The process-wide shared sandbox, emptied: the tests check that it stays untouched."""
    monkeypatch.setattr(local_module, "_shared", None)
    monkeypatch.setattr(local_module, "_shared_reserved", 0)


@pytest.mark.parametrize(("live", "expected"), [(0, [12, 6]), (6, [6, 6])])
def test_each_rollout_call_sizes_the_runs_own_sandbox(make_cfg, monkeypatch, no_shared_sandbox, live,
                                                      expected):
    run = setup(make_cfg(f"rollout.max_live_episodes={live}"))
    assert isinstance(run.sandbox, LazyLocalSandbox)
    reserved, grow = [], run.sandbox.reserve_sessions
    monkeypatch.setattr(run.sandbox, "reserve_sessions", lambda n: reserved.append(n) or grow(n))
    tasks = run.stream.tasks
    assert len(run.play_eval(tasks[:4], 3, 0)) == 12      # 4 problems × k 3 (in chunks of 2 groups if 6)
    assert len(run.play_train(tasks[:2], 3, 0)) == 6
    assert reserved == expected
    assert local_module._shared is None and local_module._shared_reserved == 0   # nothing process-wide


def test_the_players_size_the_sandbox_they_are_given(make_cfg):
    box = RecordingSandbox()
    play = runtime.make_player(make_cfg("rollout.max_live_episodes=6"), None, None, None, temperature=1.0,
                               top_p=1.0, sandbox=box)
    play([], 3, 0)                                         # an empty call reserves nothing
    assert box.reserved == [0]


def test_the_env_factory_hands_the_sandbox_to_envs_that_would_use_the_shared_one(make_cfg, no_shared_sandbox):
    box = RecordingSandbox()
    env = runtime.make_env_factory(make_cfg(), box)()       # stare/PythonTool-v0, sandbox unset ("local")
    env.reset(seed=0)
    assert env.unwrapped.code_interpreter("print(6 * 7)") == "42"
    assert box.codes == ["print(6 * 7)"]
    assert local_module._shared is None
    env.close()


def test_an_explicit_sandbox_in_the_env_kwargs_is_kept(make_cfg):
    box, theirs = RecordingSandbox(), "http://127.0.0.1:9"
    cfg = make_cfg(f"data.env_kwargs.sandbox={theirs}", "data.env_kwargs.timeout=1")
    env = runtime.make_env_factory(cfg, box)()
    env.reset(seed=0)
    with pytest.raises(SandboxUnavailable, match="127.0.0.1:9"):   # their (closed) server was called
        env.unwrapped.code_interpreter("print(6 * 7)")
    assert box.codes == []
    env.close()


def test_envs_without_a_sandbox_argument_get_none(make_cfg):
    env = runtime.make_env_factory(make_cfg("data.env=stare/MathCoT-v0"), RecordingSandbox())()
    env.reset(seed=0)                                      # no TypeError: sandbox= was not passed
    env.close()

"""The rollout player sizes the process-wide local sandbox for the episodes each call plays at once."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(("live", "expected"), [(0, [12, 6]), (6, [6, 6])])
def test_each_rollout_call_reserves_its_live_episodes(make_cfg, monkeypatch, live, expected):
    import envs.sandbox
    from training.trainer import setup
    reserved = []
    monkeypatch.setattr(envs.sandbox, "reserve_shared_sessions", reserved.append)
    run = setup(make_cfg(f"rollout.max_live_episodes={live}"))
    tasks = run.stream.tasks
    assert len(run.play_eval(tasks[:4], 3, 0)) == 12      # 4 problems × k 3 (in chunks of 2 groups if 6)
    assert len(run.play_train(tasks[:2], 3, 0)) == 6
    assert reserved == expected


def test_bench_reserves_without_starting_a_sandbox(monkeypatch):
    from envs.sandbox import local
    from training.bench.worker import live_episodes, reserve_sandbox_sessions
    from training.config import load_config
    monkeypatch.setattr(local, "_shared", None)
    monkeypatch.setattr(local, "_shared_reserved", 0)
    cfg = load_config("cpu-tiny", ["rollout.prompts_per_step=16", "rollout.group_size=8", "eval.limit=64",
                                   "eval.k=8"])
    reserve_sandbox_sessions(cfg)
    assert local._shared is None and local._shared_reserved == live_episodes(cfg) == 512

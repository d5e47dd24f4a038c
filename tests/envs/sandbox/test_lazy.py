"""`LazyLocalSandbox`: a private LocalSandbox, started by the first run, sized by its owner."""

from __future__ import annotations

import pytest

from envs.sandbox import LazyLocalSandbox, RunStatus

LAZY = {"isolation": "subprocess", "workers": 0, "spare_sessions": 0, "max_concurrency": 1}


def test_nothing_starts_until_code_runs_and_the_reserved_cap_applies_at_start():
    with LazyLocalSandbox(**LAZY, max_sessions=4) as box:
        assert box.reserve_sessions(100) == 100 and box.reserve_sessions(10) == 100   # never shrinks
        assert not box.started and box.max_sessions == 100
        result = box.run("print(6 * 7)")
        assert box.started and result.status == RunStatus.Finished and result.stdout == "42\n"
        assert box.sandbox().max_sessions == 100


def test_reserving_after_the_start_grows_the_started_sandbox():
    with LazyLocalSandbox(**LAZY, max_sessions=2) as box:
        started = box.sandbox()
        assert box.sandbox() is started                          # one sandbox, started once
        assert box.reserve_sessions(7) == 7 and started.max_sessions == 7
        session = box.session()
        assert session.run("x = 5\nprint(x * 2)").stdout == "10\n"
        session.close()


def test_bad_settings_and_counts_are_refused_and_a_closed_box_stays_closed():
    with pytest.raises(ValueError, match="max_sessions"):
        LazyLocalSandbox(max_sessions=0)                         # checked at once, nothing started
    box = LazyLocalSandbox(**LAZY)
    with pytest.raises(ValueError, match="n must be an int >= 0"):
        box.reserve_sessions(-1)
    box.close()
    box.close()                                                  # idempotent, even never started
    with pytest.raises(RuntimeError, match="closed"):
        box.run("print(1)")
    assert not box.started

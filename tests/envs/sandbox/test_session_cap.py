"""The resizable session cap of `LocalSandbox` (`set_max_sessions`, `reserve_sessions`) and the shared one.

Sessions start their interpreter lazily (on the first `run`), so the cap's bookkeeping is tested
without starting any worker: `workers=0, spare_sessions=0`, weak isolation (no bubblewrap needed).
One test runs code in a session opened past the old cap.
"""

from __future__ import annotations

import threading
import time

import pytest

from envs.sandbox import LocalSandbox, SessionLimitError, reserve_shared_sessions, shared_local_sandbox
from envs.sandbox import local as local_module

LAZY = {"isolation": "subprocess", "workers": 0, "spare_sessions": 0, "max_concurrency": 1}


def _open_in_thread(box: LocalSandbox) -> tuple[threading.Thread, list]:
    got: list = []

    def target() -> None:
        try:
            got.append(box.session())
        except Exception as err:  # noqa: BLE001 - the test inspects what happened
            got.append(err)
    thread = threading.Thread(target=target)
    thread.start()
    return thread, got


def test_growing_the_cap_wakes_a_caller_waiting_for_a_slot():
    with LocalSandbox(**LAZY, max_sessions=2, session_wait_s=10.0) as box:
        held = [box.session(), box.session()]
        thread, got = _open_in_thread(box)
        time.sleep(0.2)
        assert not got and box.sessions_in_use == 2            # waiting: the cap is reached
        start = time.monotonic()
        assert box.reserve_sessions(3) == 3
        thread.join(timeout=5)
        assert time.monotonic() - start < 2, "growing the cap did not wake the waiting session()"
        assert len(got) == 1 and not isinstance(got[0], Exception)
        assert box.sessions_in_use == 3 and box.max_sessions == 3 and box.config.max_sessions == 3
        for session in [*held, got[0]]:
            session.close()
        assert box.sessions_in_use == 0


def test_shrinking_below_the_sessions_in_use_is_deferred_never_closing_one():
    with LocalSandbox(**LAZY, max_sessions=3, session_wait_s=0.1) as box:
        a, b, c = box.session(), box.session(), box.session()
        box.set_max_sessions(1)
        assert box.max_sessions == 1 and box.sessions_in_use == 3
        assert not any(s.closed for s in (a, b, c))               # nothing in use is taken away
        with pytest.raises(SessionLimitError, match="max_sessions=1"):
            box.session()
        a.close()
        b.close()                                                 # 1 open = the new cap: still full
        with pytest.raises(SessionLimitError, match="reserve_sessions"):
            box.session()
        c.close()
        box.session().close()                                     # below the cap again


def test_reserve_never_shrinks_and_bad_caps_are_refused():
    with LocalSandbox(**LAZY, max_sessions=5) as box:
        assert box.reserve_sessions(3) == 5 and box.max_sessions == 5
        for bad in (0, -1, 2.5, True):
            with pytest.raises(ValueError, match="max_sessions"):
                box.set_max_sessions(bad)
        assert box.max_sessions == 5


def test_the_65th_session_fails_at_the_default_cap_and_opens_once_reserved():
    with LocalSandbox(**LAZY, session_wait_s=0.05) as box:
        held = [box.session() for _ in range(64)]
        with pytest.raises(SessionLimitError, match="max_sessions=64"):
            box.session()
        box.reserve_sessions(65)
        held.append(box.session())
        assert box.sessions_in_use == 65
        for session in held:
            session.close()


def test_a_session_opened_past_the_old_cap_runs_code():
    with LocalSandbox(isolation="subprocess", workers=0, spare_sessions=0, max_concurrency=1,
                      max_sessions=1, session_wait_s=0.05) as box:
        first = box.session()
        box.reserve_sessions(2)
        with box.session() as second:
            assert second.run("x = 6 * 7\nprint(x)", timeout=20).stdout == "42\n"
        first.close()


def test_closing_the_sandbox_wakes_waiters_with_a_clear_error():
    box = LocalSandbox(**LAZY, max_sessions=1, session_wait_s=10.0)
    box.session()
    thread, got = _open_in_thread(box)
    time.sleep(0.1)
    box.close()
    thread.join(timeout=5)
    assert isinstance(got[0], RuntimeError) and "closed" in str(got[0])


@pytest.fixture()
def fresh_shared(monkeypatch):
    """A clean process-wide sandbox slot for the test (restored afterwards)."""
    monkeypatch.setattr(local_module, "_shared", None)
    monkeypatch.setattr(local_module, "_shared_reserved", 0)
    yield
    if local_module._shared is not None:
        local_module._shared.close()


def test_reserving_before_the_shared_sandbox_exists_starts_nothing_and_sizes_it(fresh_shared):
    assert reserve_shared_sessions(100) == 100
    assert local_module._shared is None                          # nothing started for a reservation
    box = shared_local_sandbox(**LAZY)
    assert box.max_sessions == 100
    assert reserve_shared_sessions(120) == 120 and box.max_sessions == 120
    assert reserve_shared_sessions(10) == 120                    # never shrinks
    assert shared_local_sandbox(**LAZY, max_sessions=130) is box and box.max_sessions == 130
    with pytest.raises(ValueError, match="other settings"):
        shared_local_sandbox(**{**LAZY, "max_concurrency": 2})
    with pytest.raises(ValueError, match="n must be an int >= 0"):
        reserve_shared_sessions(-1)

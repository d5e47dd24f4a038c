"""Slow: hostile and ordinary runs mixed, from many threads, then nothing may be left behind."""

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from envs.sandbox import LocalSandbox, RunStatus

PROBES = [
    ("print(6 * 7)", RunStatus.Finished),
    ("while True: pass", RunStatus.TimeLimitExceeded),
    ("x = bytearray(1 << 30)", RunStatus.MemoryLimitExceeded),
    ("import os\nfor _ in range(40):\n    os.fork() or (os.setsid(), __import__('time').sleep(60))",
     RunStatus.Finished),
    ("print('x' * (5 << 20))", RunStatus.Finished),
    ("import os, signal; os.kill(os.getppid(), signal.SIGKILL); print('ok')", RunStatus.Finished),
]


@pytest.mark.slow
def test_mixed_hostile_load_leaves_nothing_behind():
    with LocalSandbox(isolation="bwrap", max_concurrency=4, workers=4) as box:
        jobs = PROBES * 8
        with ThreadPoolExecutor(12) as pool:
            results = list(pool.map(lambda p: box.run(p[0], timeout=1.0, memory_mb=256), jobs))
        assert [r.status for r in results] == [status for _, status in jobs]
        uids = {w.spec.uid for w in box._pool._idle}
        assert box.run("print('fine')").stdout == "fine\n"
    if None in uids:
        pytest.skip("workers share our uid (non-root host): leftovers cannot be told apart by uid")
    leftover = [pid for pid in filter(str.isdigit, os.listdir("/proc")) if _uid_of(pid) in uids]
    assert leftover == [], "processes (or zombies) of the closed sandbox's uids remain"


def _uid_of(pid):
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None

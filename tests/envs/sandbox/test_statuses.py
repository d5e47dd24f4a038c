"""Hostile probes, class 3: the model's own failures stay the model's.

Statuses are decided by the supervisor from what it observed; `SandboxError` means the sandbox
failed and nothing the code does can produce it; session cells cannot keep threads or processes
running between cells and cannot forge their supervisor's replies.
"""

import time

import pytest

from envs.sandbox import RunStatus

SIGNAL_INIT = """
import os, signal
for sig in {sigs}:
    try:
        os.kill(1, sig)
    except OSError as e:
        print('refused', sig, e.errno)
print('still here', flush=True)
"""
SIGNALS = "[signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGQUIT, signal.SIGALRM]"
FORGE_FDS = """
import os
for fd in range(3, 64):
    try:
        os.write(fd, {payload!r})
    except OSError:
        pass
print('forged')
"""
FORGED_REPLY = b'{"id": 1, "rc": 0, "signal": null, "memory": true, "cpu_time": 0, "exited": false}'


@pytest.mark.parametrize("sig", ["signal.SIGINT", SIGNALS])
def test_signalling_the_supervisor_is_not_a_sandbox_error(box, sig):
    for _ in range(3):   # more than one worker may serve these
        r = box.run(SIGNAL_INIT.format(sigs=f"[{sig}]" if not sig.startswith("[") else sig), timeout=5)
        assert r.status is RunStatus.Finished and r.stdout.endswith("still here\n"), r
    assert box.run("print('next')").stdout == "next\n"


def test_signalling_the_supervisor_from_a_session_cell(box):
    with box.session() as s:
        s.run("kept = 1")
        r = s.run(SIGNAL_INIT.format(sigs=SIGNALS), timeout=5)
        assert r.status is RunStatus.Finished and r.stdout.endswith("still here\n"), r
        assert s.run("print(kept)").stdout == "1\n" and s.restarts == 0


@pytest.mark.parametrize("payload", [b"M", FORGED_REPLY])
def test_writing_to_inherited_descriptors_forges_no_status(box, payload):
    r = box.run(FORGE_FDS.format(payload=payload), timeout=5)
    assert (r.status, r.return_code, r.stdout) == (RunStatus.Finished, 0, "forged\n"), r
    assert box.run("import sys; sys.exit(4)").return_code == 4


def test_a_session_cell_cannot_forge_its_supervisors_reply(box):
    with box.session() as s:
        r = s.run(FORGE_FDS.format(payload=FORGED_REPLY) + "import sys; sys.exit(3)", timeout=5)
        assert (r.status, r.return_code) == (RunStatus.Finished, 3), r
        for code, rc, out in [("print('two')", 0, "two\n"), ("import sys; sys.exit(7)", 7, "")]:
            r = s.run(code, timeout=5)
            assert (r.status, r.return_code, r.stdout) == (RunStatus.Finished, rc, out), r


def test_memory_error_is_still_reported_from_what_the_run_printed(box):
    r = box.run("x = bytearray(4 << 30)", memory_mb=128)
    assert r.status is RunStatus.MemoryLimitExceeded and r.return_code == 1


def test_a_session_cell_cannot_keep_a_thread_running(box):
    with box.session() as s:
        r = s.run("import threading, time\nthreading.Thread(target=time.sleep, args=(1000,), daemon=True)"
                  ".start()\nx = 1", timeout=5)
        assert r.status is RunStatus.Finished and "threads" in r.stderr, r
        r = s.run("import threading\nprint(threading.active_count(), 'x' in globals())", timeout=5)
        assert r.stdout == "1 False\n"


def test_a_joined_thread_keeps_the_session(box):
    with box.session() as s:
        s.run("import threading\nt = threading.Thread(target=print, args=('in thread',))\nt.start()\n"
              "t.join()\nx = 5")
        assert s.run("print(x)").stdout == "5\n" and s.restarts == 0


def test_nothing_runs_between_session_cells(box):
    with box.session() as s:
        s.run("import signal\nticks = [0]\n"
              "def tick(*_):\n    ticks[0] += 1\n"
              "signal.signal(signal.SIGALRM, tick)\nsignal.setitimer(signal.ITIMER_REAL, 0.01, 0.01)")
        time.sleep(1.0)   # ~100 timer ticks if the kernel ran between cells
        r = s.run("signal.setitimer(signal.ITIMER_REAL, 0)\nprint(ticks[0])")
        assert int(r.stdout) < 40, r


def test_a_session_cell_leaves_no_process_behind(box):
    with box.session() as s:
        s.run("import subprocess\np = subprocess.Popen(['sleep', '100'])")
        r = s.run("import os\n"
                  "live = [p for p in os.listdir('/proc') if p.isdigit() and int(p) not in (1, os.getpid())\n"
                  "        and open(f'/proc/{p}/stat').read().rsplit(')', 1)[1].split()[0] != 'Z']\n"
                  "print(live)")
        assert r.stdout == "[]\n", r

"""The hostile battery: each probe is bounded (small timeouts, capped loops) so that a sandbox that
failed to contain it still could not hurt the machine; each asserts containment *and* honest status."""

import os
import pathlib
import socket
import time
import uuid

import pytest

from envs.sandbox import RunStatus

CHECKOUT = pathlib.Path(__file__).resolve().parents[3]


def _host_processes_with(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in pathlib.Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            pass
    return found


def test_infinite_loop_times_out_and_the_pool_recovers(box):
    r = box.run("while True: pass", timeout=0.5)
    assert r.status is RunStatus.TimeLimitExceeded and r.return_code is None
    assert 0.5 <= r.wall_time < 3
    assert box.run("print('next')").stdout == "next\n"


def test_sleep_past_timeout_keeps_partial_output(box):
    r = box.run("import time\nprint('before', flush=True)\ntime.sleep(30)", timeout=0.5)
    assert r.status is RunStatus.TimeLimitExceeded and r.stdout == "before\n"
    assert r.wall_time < 3


def test_rlimits_are_set_in_the_child(box):
    r = box.run("import resource as r\n"
                "print([r.getrlimit(k) for k in (r.RLIMIT_CPU, r.RLIMIT_AS, r.RLIMIT_NPROC, "
                "r.RLIMIT_FSIZE, r.RLIMIT_NOFILE, r.RLIMIT_CORE)])", timeout=2.5, memory_mb=300)
    c = box.config
    expected = [(4, 4), (300 << 20,) * 2, (c.max_processes,) * 2, (c.max_file_mb << 20,) * 2,
                (c.max_open_files,) * 2, (0, 0)]
    assert r.stdout == f"{expected}\n"


def test_cpu_limit_signal_is_reported_as_timeout(box):
    # RLIMIT_CPU (ceil(timeout) + 1 s) is a backstop behind the wall clock; its SIGXCPU must read as a timeout
    r = box.run("import os, signal\nos.kill(os.getpid(), signal.SIGXCPU)")
    assert r.status is RunStatus.TimeLimitExceeded and r.return_code == -24


@pytest.mark.parametrize("bomb", ["x = bytearray(2 << 30)", "x = [0] * (1 << 30)",
                                  "s = []\nwhile True: s.append(' ' * (1 << 20))"])
def test_memory_bomb_is_memory_limit_exceeded(box, bomb):
    r = box.run(bomb, memory_mb=128, timeout=10)
    assert r.status is RunStatus.MemoryLimitExceeded, r
    assert "MemoryError" in r.stderr and r.wall_time < 10


def test_caught_memory_error_is_not_reported_as_limit(box):
    r = box.run("try:\n    bytearray(2 << 30)\nexcept MemoryError:\n    print('handled')", memory_mb=128)
    assert (r.status, r.stdout) == (RunStatus.Finished, "handled\n")


def test_output_flood_is_drained_capped_and_flagged(box):
    start = time.monotonic()
    r = box.run("import sys\nsys.stdout.write('x' * (10 << 20))\n"
                "sys.stderr.write('e' * (3 << 20))\nprint('done')")
    assert r.status is RunStatus.Finished and r.return_code == 0
    assert r.stdout_truncated and r.stderr_truncated
    assert len(r.stdout) == box.config.output_limit_bytes == len(r.stderr)
    assert time.monotonic() - start < 5


def test_endless_output_stops_at_the_timeout(box):
    r = box.run("while True: print('y' * 1000)", timeout=1.0)
    assert r.status is RunStatus.TimeLimitExceeded and r.stdout_truncated
    assert len(r.stdout) == box.config.output_limit_bytes


FORK_FLOOD = """
import os, time
pids = []
for i in range(300):
    try:
        pid = os.fork()
    except OSError as e:
        print('fork failed after', i, e.errno)
        break
    if pid == 0:
        time.sleep(20)
        os._exit(0)
    pids.append(pid)
else:
    print('forked all')
"""


def test_fork_flood_hits_the_process_limit(box):
    r = box.run(FORK_FLOOD, timeout=10)
    assert r.status is RunStatus.Finished
    assert r.stdout.startswith("fork failed after"), r.stdout
    assert int(r.stdout.split()[3]) < box.config.max_processes
    assert box.run("print('ok')").stdout == "ok\n"


def test_network_connect_to_a_host_socket_fails(box):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        port = listener.getsockname()[1]
        code = (f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
                f"    print('connected')\nexcept OSError as e:\n    print('blocked', e.errno)")
        r = box.run(code, timeout=5)
        assert r.stdout.startswith("blocked"), r
        with pytest.raises(BlockingIOError):
            listener.accept()
    r = box.run("import socket\ntry:\n    socket.getaddrinfo('example.com', 80)\n    print('resolved')\n"
                "except OSError:\n    print('no dns')", timeout=5)
    assert r.stdout == "no dns\n"


@pytest.mark.parametrize("target", [str(CHECKOUT / "PWNED_BY_SANDBOX"),
                                    str(pathlib.Path.home() / "PWNED_BY_SANDBOX"),
                                    "/usr/PWNED_BY_SANDBOX", "/etc/PWNED_BY_SANDBOX"])
def test_writes_outside_private_tmp_fail(box, target):
    r = box.run(f"try:\n    open({target!r}, 'w').write('x')\n    print('wrote')\nexcept OSError as e:\n"
                f"    print('denied', type(e).__name__)")
    assert r.stdout.startswith("denied"), r
    assert not os.path.exists(target)


def test_checkout_and_home_are_not_even_readable(box):
    r = box.run(f"import os\nprint(os.path.exists({str(CHECKOUT)!r}), os.path.exists('/root'), "
                f"os.path.exists('/etc/passwd'))")
    assert r.stdout == "False False False\n"


def test_host_environment_is_not_visible(box, monkeypatch):
    monkeypatch.setenv("STARE_SECRET_PROBE", "s3cr3t-value")
    r = box.run("import os\nprint(sorted(os.environ))\nprint(open('/proc/1/environ','rb').read())")
    assert "s3cr3t" not in r.stdout and "STARE_SECRET_PROBE" not in r.stdout
    assert "HOME" in r.stdout and "AWS" not in r.stdout


def test_background_process_in_new_session_dies_with_the_run(box):
    marker = f"sandbox-escape-{uuid.uuid4().hex}"
    code = ("import subprocess, os\n"
            f"subprocess.Popen(['/usr/bin/python3', '-c', 'import time; time.sleep(30)', '{marker}'],"
            " start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    os.setsid()\n"
            "    os.execv('/usr/bin/python3',"
            f" ['python3', '-c', 'import time; time.sleep(30)', '{marker}-2'])\n"
            "print('started')")
    r = box.run(code, timeout=5)
    assert r.stdout == "started\n"
    assert _host_processes_with(marker) == []


def test_background_process_dies_on_timeout_too(box):
    marker = f"sandbox-escape-{uuid.uuid4().hex}"
    code = ("import subprocess, time\n"
            f"subprocess.Popen(['/usr/bin/python3', '-c', 'import time; time.sleep(30)', '{marker}'],"
            " start_new_session=True)\n"
            "time.sleep(30)")
    r = box.run(code, timeout=0.5)
    assert r.status is RunStatus.TimeLimitExceeded
    assert _host_processes_with(marker) == []


@pytest.mark.parametrize("attack", ["os.kill(os.getppid(), signal.SIGKILL)", "os.kill(1, signal.SIGKILL)",
                                    "os.kill(-1, signal.SIGKILL)", "os.kill(os.getppid(), signal.SIGSTOP)"])
def test_killing_the_parent_does_not_break_the_sandbox(box, attack):
    r = box.run(f"import os, signal\n{attack}\nprint('still here')", timeout=5)
    assert r.status is RunStatus.Finished
    for _ in range(3):  # every worker the pool hands out still works
        assert box.run("print('alive')", timeout=5).stdout == "alive\n"


def test_file_size_limit(box):
    r = box.run(f"open('big', 'wb').write(b'0' * ({box.config.max_file_mb + 8} << 20))")
    assert r.return_code == 1 and "File too large" in r.stderr


def test_classic_fork_bomb_is_contained(box):
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    r = box.run(bomb, timeout=1.0)
    assert r.status is RunStatus.TimeLimitExceeded
    assert box.run("import os; print(len([p for p in os.listdir('/proc') if p.isdigit()]))").stdout == "2\n"


def test_filling_the_private_tmp_stops_at_its_size(box):
    code = ("import os\nfor i in range(200):\n    try:\n"
            "        open(f'/tmp/f{i}', 'wb').write(b'0' * (4 << 20))\n"
            "    except OSError as e:\n        print('full after', i, e.errno)\n        break")
    r = box.run(code, timeout=10)
    n = int(r.stdout.split()[2])
    assert r.stdout.endswith(" 28\n") and n <= box.config.tmp_size_mb // 4, r  # ENOSPC
    assert box.run("import os; print(os.listdir('/tmp'))").stdout == "['work']\n"


def test_output_flood_does_not_grow_host_memory(box):
    import tracemalloc

    tracemalloc.start()
    try:
        r = box.run("import sys\nfor _ in range(50):\n    sys.stdout.write('x' * (1 << 20))", timeout=10)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert r.stdout_truncated and len(r.stdout) == box.config.output_limit_bytes
    assert peak < 8 * box.config.output_limit_bytes  # 50 MB went through; only the cap is kept


def test_a_killed_worker_leaves_no_process_or_zombie():
    from envs.sandbox import LocalSandbox

    with LocalSandbox(isolation="bwrap", max_concurrency=1, workers=1) as own:
        (worker,) = own._pool._idle
        if worker.spec.uid is None:
            pytest.skip("non-root host: workers share our uid")
        assert own.run("import time; time.sleep(30)", timeout=0.3).status is RunStatus.TimeLimitExceeded
        assert not worker.alive
        left = [p for p in filter(str.isdigit, os.listdir("/proc")) if _owner(p) == worker.spec.uid]
        assert left == []


def _owner(pid):
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def test_shared_memory_does_not_outlive_the_run(box):
    plant = ("import ctypes\nlibc = ctypes.CDLL(None)\nprint(libc.shmget(4242, 1 << 20, 0o1600) >= 0)\n"
             "open('/dev/shm/left', 'w').write('x')")
    assert box.run(plant).stdout == "True\n"
    look = "import os\nprint(len(open('/proc/sysvipc/shm').readlines()) - 1, os.listdir('/dev/shm'))"
    for _ in range(box.config.concurrency):  # whichever worker ran the plant
        assert box.run(look).stdout == "0 []\n"


def test_dev_shm_is_size_capped(box):
    code = ("try:\n    for i in range(8):\n        open(f'/dev/shm/big{i}', 'wb').write(b'0' * (20 << 20))\n"
            "    print('wrote')\nexcept OSError as e:\n    print('full', e.errno)")  # 160 MB > 64 MB cap
    assert box.run(code).stdout == "full 28\n"

"""Persistent sessions: state carries over, failures are honest, the cap holds."""

import threading
import time

import pytest

from envs.sandbox import LocalSandbox, RunStatus, SessionLimitError


def test_variables_imports_and_files_persist(box):
    with box.session() as s:
        assert s.run("import math\nx = 40\nopen('notes.txt', 'w').write('hi')").status is RunStatus.Finished
        r = s.run("x += 2\nprint(x, math.pi > 3, open('notes.txt').read())")
        assert r.stdout == "42 True hi\n"


def test_last_expression_is_displayed(box):
    with box.session() as s:
        assert s.run("y = 6 * 7\ny").stdout == "42\n"
        assert s.run("None").stdout == ""


def test_error_keeps_the_session_and_shows_the_cell_source(box):
    with box.session() as s:
        s.run("z = 1")
        r = s.run("z / 0")
        assert r.return_code == 1 and "z / 0" in r.stderr and "ZeroDivisionError" in r.stderr
        assert s.run("print(z)").stdout == "1\n"


def test_stdin_per_cell(box):
    with box.session() as s:
        assert s.run("a = input()", stdin="first\n").return_code == 0
        assert s.run("print(a, input())", stdin="second\n").stdout == "first second\n"


def test_memory_error_is_reported_and_the_session_survives(box):
    with box.session() as s:
        s.run("keep = 'kept'")
        assert s.run("b = bytearray(2 << 30)", memory_mb=256).status is RunStatus.MemoryLimitExceeded
        assert s.run("print(keep)").stdout == "kept\n"


def test_timeout_kills_the_kernel_and_says_so(box):
    with box.session() as s:
        s.run("w = 1")
        r = s.run("import time; time.sleep(30)", timeout=0.5)
        assert r.status is RunStatus.TimeLimitExceeded and "starts an empty one" in r.stderr
        r = s.run("print(w)")
        assert "NameError" in r.stderr and s.restarts == 1


def test_exit_of_the_interpreter_is_reported(box):
    with box.session() as s:
        r = s.run("import os; os._exit(5)")
        assert (r.status, r.return_code) == (RunStatus.Finished, 5) and "restarts empty" in r.stderr
        assert s.run("print('fresh')").stdout == "fresh\n"


def test_sys_exit_does_not_end_the_session(box):
    with box.session() as s:
        s.run("v = 9")
        assert s.run("import sys; sys.exit(2)").return_code == 2
        assert s.run("print(v)").stdout == "9\n"


def test_sessions_are_isolated_from_each_other(box):
    with box.session() as a, box.session() as b:
        a.run("secret = 1")
        assert "NameError" in b.run("secret").stderr


def test_session_cap_waits_then_raises_and_close_frees_a_slot():
    settings = {"isolation": "bwrap", "max_concurrency": 1, "workers": 1, "max_sessions": 2,
                "session_wait_s": 0.2}
    with LocalSandbox(**settings) as box:
        s1, s2 = box.session(), box.session()
        start = time.monotonic()
        with pytest.raises(SessionLimitError, match="max_sessions=2"):
            box.session()
        assert time.monotonic() - start >= 0.2
        threading.Timer(0.05, s1.close).start()
        s3 = box.session()  # waits for the slot s1 frees
        assert s3.run("print(3)").stdout == "3\n"
        s1.close()  # idempotent: must not free a second slot
        with pytest.raises(SessionLimitError):
            box.session()
        with pytest.raises(RuntimeError, match="closed"):
            s1.run("print(1)")
        s2.close()
        s3.close()


def test_spare_interpreters_make_a_new_session_start_at_once():
    with LocalSandbox(isolation="bwrap", max_concurrency=1, workers=1, spare_sessions=1) as box:
        deadline = time.monotonic() + 20
        while not box._spare_sessions._ready:
            assert time.monotonic() < deadline, "the spare session interpreter never started"
            time.sleep(0.01)
        spare = box._spare_sessions._ready[0]
        with box.session() as s:
            assert s.run("print('warm')").stdout == "warm\n"
            assert s._worker is spare
        with box.session() as s:  # the replacement (or a fresh one) works just as well
            assert s.run("print(1)").stdout == "1\n"


def test_a_cell_cannot_lift_the_session_memory_cap(box):
    with box.session() as s:
        s.run("x = 1", memory_mb=200)
        lift = s.run("import resource as r\ntry:\n    r.setrlimit(r.RLIMIT_AS, (r.RLIM_INFINITY,) * 2)\n"
                     "    print('lifted')\nexcept ValueError:\n    print('refused')", memory_mb=200)
        assert lift.stdout == "refused\n"
        assert s.run("b = bytearray(300 << 20)", memory_mb=1024).status is RunStatus.MemoryLimitExceeded
        assert s.run("b = bytearray(50 << 20); print(len(b) >> 20)", memory_mb=150).stdout == "50\n"

"""Ordinary programs through the isolated LocalSandbox: output, errors, stdin, exit codes, arguments."""

import pytest

from envs.sandbox import INSTALL_HINT, IsolationUnavailable, LocalSandbox, RunStatus, launch


def test_reports_isolation(box):
    assert box.isolation == "bwrap"


def test_stdout_stderr_and_exit_code(box):
    r = box.run("import sys\nprint('out')\nprint('err', file=sys.stderr)")
    assert (r.status, r.stdout, r.stderr, r.return_code) == (RunStatus.Finished, "out\n", "err\n", 0)
    assert 0 < r.wall_time < 5 and not r.stdout_truncated


def test_exception_is_a_finished_run_with_traceback(box):
    r = box.run("def f():\n    return 1 / 0\nf()")
    assert r.status is RunStatus.Finished and r.return_code == 1
    assert "ZeroDivisionError: division by zero" in r.stderr
    assert "return 1 / 0" in r.stderr, "the traceback should quote the user's source line"
    assert "_zygote" not in r.stderr, "the supervisor's frames must not leak into the traceback"


def test_stdin_is_fed(box):
    r = box.run("import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))", stdin="1 2 3\n40\n")
    assert r.stdout == "46\n"


def test_sys_exit_codes(box):
    assert box.run("import sys; sys.exit(3)").return_code == 3
    r = box.run("raise SystemExit('bye')")
    assert (r.return_code, r.stderr) == (1, "bye\n")
    assert box.run("import os; os._exit(7)").return_code == 7


def test_killed_by_signal_is_a_crash_not_a_timeout(box):
    r = box.run("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    assert r.status is RunStatus.Finished and r.return_code == -11


def test_unicode_and_name_main(box):
    r = box.run("if __name__ == '__main__':\n    print('héllo ✓')")
    assert r.stdout == "héllo ✓\n"


def test_runs_do_not_share_state_or_files(box):
    box.run("open('left.txt', 'w').write('x'); import builtins; builtins.LEAK = 1")
    r = box.run("import os, builtins\n"
                "print(os.path.exists('left.txt'), hasattr(builtins, 'LEAK'), os.listdir('/tmp'))")
    assert r.stdout.startswith("False False")


def test_random_differs_between_runs(box):
    outs = {box.run("import random; print(random.random())").stdout for _ in range(4)}
    assert len(outs) == 4


def test_bash_language(box):
    r = box.run("echo $((6*7)); read x; echo got $x", language="bash", stdin="abc\n")
    assert r.stdout == "42\ngot abc\n" and r.return_code == 0


@pytest.mark.parametrize("kwargs, field", [({"language": "cpp"}, "language"), ({"timeout": 0}, "timeout"),
                                           ({"memory_mb": 1}, "memory_mb")])
def test_bad_arguments_raise_naming_the_field(box, kwargs, field):
    with pytest.raises(ValueError, match=field):
        box.run("print(1)", **kwargs)


def test_auto_without_bwrap_refuses_with_install_hint(monkeypatch):
    monkeypatch.setattr(launch, "bwrap_problem", lambda: "`bwrap` is not on PATH.")
    with pytest.raises(IsolationUnavailable, match="apt-get install -y bubblewrap"):
        LocalSandbox()
    assert "isolation=\"subprocess\"" in INSTALL_HINT


def test_subprocess_mode_is_explicit_and_reported():
    with LocalSandbox(isolation="subprocess", max_concurrency=1, workers=1) as weak:
        assert weak.isolation == "subprocess"
        r = weak.run("print(input())", stdin="ok\n")
        assert (r.status, r.stdout) == (RunStatus.Finished, "ok\n")
        assert weak.run("import time; time.sleep(5)", timeout=0.3).status is RunStatus.TimeLimitExceeded


def test_close_is_idempotent_and_final():
    box = LocalSandbox(isolation="subprocess", max_concurrency=1, workers=1)
    box.close()
    box.close()
    with pytest.raises(RuntimeError, match="closed"):
        box.run("print(1)")


def test_a_worker_that_cannot_start_is_a_sandbox_error_not_an_exception(box):
    settings = {"isolation": "bwrap", "python": "/nonexistent/python3", "workers": 0, "max_concurrency": 1}
    with LocalSandbox(**settings) as broken:
        r = broken.run("print(1)")
        assert r.status is RunStatus.SandboxError and "failed to start" in r.stderr
        with broken.session() as s:
            assert s.run("print(1)").status is RunStatus.SandboxError


def test_session_of_a_closed_sandbox_refuses():
    box = LocalSandbox(isolation="subprocess", max_concurrency=1, workers=1)
    s = box.session()
    box.close()
    with pytest.raises(RuntimeError, match="closed"):
        s.run("print(1)")
    with pytest.raises(RuntimeError, match="closed"):
        box.session()

"""FusionSandbox against our own server, its status mapping, its bounded retries, and make_sandbox."""

import time

import pytest
from sandbox_fusion import RunCodeResponse

from envs.sandbox import FusionSandbox, LocalSandbox, RunStatus, make_sandbox, shared_local_sandbox
from envs.sandbox.fusion import to_run_result


@pytest.fixture(scope="module")
def fusion(server_url):
    with FusionSandbox(server_url + "/run_code", max_concurrency=4) as sandbox:
        yield sandbox


def test_statuses_through_our_server(fusion):
    ok = fusion.run("print(input() * 2)", stdin="ab\n")
    assert (ok.status, ok.stdout, ok.return_code) == (RunStatus.Finished, "abab\n", 0)
    assert fusion.run("import sys; sys.exit(4)").return_code == 4
    tle = fusion.run("while True: pass", timeout=0.5)
    assert tle.status is RunStatus.TimeLimitExceeded and tle.return_code is None
    mle = fusion.run("x = bytearray(1 << 30)", memory_mb=128)
    assert mle.status is RunStatus.MemoryLimitExceeded


def test_threads_share_one_fusion_sandbox(fusion):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda i: fusion.run(f"print({i})").stdout, range(16)))
    assert outs == [f"{i}\n" for i in range(16)]


def test_emulated_session_replays_quietly(fusion):
    with fusion.session() as s:
        assert s.run("import random\nx = 5\nprint('once')").stdout == "once\n"
        assert s.run("bad = 1/0").return_code == 1
        r = s.run("x * 2")
        assert (r.stdout, r.stderr) == ("10\n", "")
        err = s.run("bad")
        assert "NameError" in err.stderr and "_sb_cell" not in err.stderr


def test_unreachable_server_is_a_bounded_sandbox_error():
    with FusionSandbox("http://127.0.0.1:9", max_attempts=2, retry_wait_s=0.05) as dead:
        start = time.monotonic()
        r = dead.run("print(1)")
    assert r.status is RunStatus.SandboxError and r.return_code is None
    assert time.monotonic() - start < 5


def test_client_errors_are_not_retried(server_url):
    with FusionSandbox(server_url, max_attempts=5, retry_wait_s=1.0) as fusion:
        start = time.monotonic()
        r = fusion.run("print(1)", language="cpp")  # our server answers 422: retrying cannot help
    assert r.status is RunStatus.SandboxError and "422" in r.stderr
    assert time.monotonic() - start < 1.0


def test_mapping_of_sandbox_error_and_compile_failure():
    err = RunCodeResponse(status="SandboxError", message="pod lost", compile_result=None, run_result=None)
    assert to_run_result(err, 0.1).status is RunStatus.SandboxError
    comp = RunCodeResponse(status="Failed", message="", run_result=None, compile_result={
        "status": "Finished", "execution_time": 0.1, "return_code": 1, "stdout": "", "stderr": "syntax"})
    r = to_run_result(comp, 0.1)
    assert (r.status, r.return_code, r.stderr) == (RunStatus.Finished, 1, "syntax")


def test_bad_endpoint_raises():
    with pytest.raises(ValueError, match="endpoint"):
        FusionSandbox("localhost:8080")


def test_make_sandbox(box):
    assert make_sandbox(box) is box
    shared = make_sandbox("local")
    assert shared is shared_local_sandbox() and isinstance(shared, LocalSandbox)
    remote = make_sandbox("http://127.0.0.1:1")
    assert isinstance(remote, FusionSandbox)
    remote.close()
    with pytest.raises(ValueError, match="'local'"):
        make_sandbox("docker")

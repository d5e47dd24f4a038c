"""Hostile probes, class 2: a result always belongs to its own request.

A run that does not complete normally (the host raised mid-request: Ctrl-C, an overflow) must retire
its worker, or the next request on that worker reads the previous run's reply ("Success" and "Failed"
swap). Replies carry the id of their request; a mismatch is an error, never a result.
"""

import json
import math
import os
import socket

import pytest

from envs.sandbox import LocalSandbox, RunStatus
from envs.sandbox.limits import MAX_MEMORY_MB, MAX_TIMEOUT_S, MIN_MEMORY_MB
from envs.sandbox.worker import Worker, _memfd


@pytest.fixture()
def one_worker(box):
    """A sandbox with exactly one warm worker, so every run reuses it (the case that swapped results)."""
    sandbox = LocalSandbox(isolation="bwrap", max_concurrency=1, workers=1, spare_sessions=0)
    yield sandbox
    sandbox.close()


def test_host_interrupt_mid_request_retires_the_worker(one_worker, monkeypatch):
    real = Worker._collect
    calls = {"n": 0}

    def interrupted(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:          # Ctrl-C in the caller after the request went out
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Worker, "_collect", interrupted)
    with pytest.raises(KeyboardInterrupt):
        one_worker.run("import sys; sys.exit(3)")
    for _ in range(3):   # every later run gets its own exit code, never the interrupted run's 3
        r = one_worker.run("print('ok')")
        assert (r.status, r.return_code, r.stdout) == (RunStatus.Finished, 0, "ok\n"), r


def test_huge_timeout_is_a_value_error_and_nothing_goes_out_of_step(one_worker):
    with pytest.raises(ValueError, match="timeout"):
        one_worker.run("import sys; sys.exit(3)", timeout=3e6)
    r = one_worker.run("print('ok')")
    assert (r.return_code, r.stdout) == (0, "ok\n"), r
    r = one_worker.run("import sys; sys.exit(5)")
    assert r.return_code == 5


def _send_stale_request(worker, code):
    """Put a request in flight on the worker's channel behind the host's back (an out-of-step worker)."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    fds = [_memfd("code", code.encode()), _memfd("stdin", b""), out_w, err_w]
    socket.send_fds(worker._sock, [json.dumps({"id": 10 ** 6, "limits": {}, "language": "python"}).encode()],
                    fds)
    for fd in (*fds, out_r, err_r):
        os.close(fd)


def test_a_reply_for_another_request_is_an_error_never_a_result(one_worker):
    worker = one_worker._pool.acquire()
    try:
        _send_stale_request(worker, "import sys; sys.exit(3)")
        r = worker.run("print('mine')", stdin="", limits=one_worker.limits(timeout=5, memory_mb=256),
                       timeout=5, output_limit=1 << 16)
    finally:
        one_worker._pool.release(worker)
    assert r.status is RunStatus.SandboxError and r.return_code is None, r   # never the stale exit code 3
    assert "request" in r.stderr and not worker.alive      # retired
    assert one_worker.run("print(1)").stdout == "1\n"


@pytest.mark.parametrize("timeout", [0, -1, math.nan, math.inf, -math.inf, MAX_TIMEOUT_S * 1.01, 3e6, "5",
                                     None])
def test_bad_timeouts_are_value_errors_naming_the_field(box, timeout):
    with pytest.raises(ValueError, match="timeout"):
        box.run("print(1)", timeout=timeout)
    with box.session() as session, pytest.raises(ValueError, match="timeout"):
        session.run("print(1)", timeout=timeout)


@pytest.mark.parametrize("memory", [0, -5, MIN_MEMORY_MB - 1, MAX_MEMORY_MB + 1, 10 ** 12, 256.5, math.nan,
                                    True, "512"])
def test_bad_memory_limits_are_value_errors_naming_the_field(box, memory):
    with pytest.raises(ValueError, match="memory_mb"):
        box.run("print(1)", memory_mb=memory)
    with box.session() as session, pytest.raises(ValueError, match="memory_mb"):
        session.run("print(1)", memory_mb=memory)


def test_bounds_themselves_are_accepted(box):
    assert box.run("print(1)", timeout=MAX_TIMEOUT_S, memory_mb=MAX_MEMORY_MB).stdout == "1\n"
    assert box.run("print(2)", timeout=0.5, memory_mb=MIN_MEMORY_MB).return_code in (0, 1)


@pytest.mark.parametrize("field, value", [("run_timeout", 0), ("run_timeout", -3), ("run_timeout", "NaN"),
                                          ("run_timeout", "Infinity"), ("run_timeout", 3e6),
                                          ("compile_timeout", -1), ("memory_limit_MB", 8),
                                          ("memory_limit_MB", 10 ** 12), ("memory_limit_MB", 256.5)])
def test_server_refuses_bad_limits_with_422_naming_the_field(server_url, field, value):
    import httpx

    body = json.dumps({"code": "print(1)", "language": "python", field: value})  # NaN/Infinity as JSON tokens
    body = body.replace('"NaN"', "NaN").replace('"Infinity"', "Infinity")
    resp = httpx.post(f"{server_url}/run_code", content=body, headers={"content-type": "application/json"},
                      timeout=30)
    assert resp.status_code == 422 and field in resp.text, resp.text


@pytest.mark.parametrize("field, value", [("cell_timeout", -1), ("total_timeout", 0), ("total_timeout", 1e9),
                                          ("memory_limit_MB", 1)])
def test_server_refuses_bad_jupyter_limits_with_422(server_url, field, value):
    import httpx

    resp = httpx.post(f"{server_url}/run_jupyter", json={"cells": ["1"], field: value}, timeout=30)
    assert resp.status_code == 422 and field in resp.text, resp.text

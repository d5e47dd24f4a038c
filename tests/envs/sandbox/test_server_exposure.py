"""Hostile probes, class 4: the sandbox server is safe to expose (loopback-only, bounded load).

The server here wraps a fake sandbox where the probe needs control over timing or faults, so these
run without bubblewrap and in a few seconds.
"""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from typer.testing import CliRunner

from envs.sandbox.http_guard import check_bind
from envs.sandbox.result import RunResult, RunStatus
from envs.sandbox.server import serve_in_background
from training.cli import app as cli

HOST_PATH = "/root/secret-checkout/envs/sandbox/worker.py"


class _Blocking:
    """A sandbox whose runs wait on an event (a burst that fills every server thread)."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def run(self, code, **_):
        if code == "raise":
            raise RuntimeError(f"boom in {HOST_PATH}")
        if code == "fault":
            return RunResult(status=RunStatus.SandboxError, stdout="", return_code=None, wall_time=0.0,
                             stderr=f"[sandbox] bwrap: Can't mount proc on {HOST_PATH}")
        self.release.wait(30)
        return RunResult(status=RunStatus.Finished, stdout="done\n", stderr="", return_code=0, wall_time=0.0)


@pytest.fixture()
def fake():
    sandbox = _Blocking()
    yield sandbox
    sandbox.release.set()


def test_a_burst_does_not_starve_the_health_check(fake):
    with serve_in_background(fake) as url, ThreadPoolExecutor(64) as pool:
        try:
            burst = [pool.submit(httpx.post, f"{url}/run_code", json={"code": "wait", "language": "python"},
                                 timeout=60) for _ in range(60)]
            time.sleep(1.0)           # every server thread is now blocked in a run
            start = time.monotonic()
            pong = httpx.get(f"{url}/v1/ping", timeout=8)   # before: queued behind the blocked runs
            assert pong.json() == "pong" and time.monotonic() - start < 5.0
        finally:
            fake.release.set()
        assert all(f.result().json()["status"] == "Success" for f in burst)


@pytest.mark.parametrize("code", ["raise", "fault"])
def test_no_response_carries_a_host_path_or_traceback(fake, code):
    with serve_in_background(fake) as url:
        resp = httpx.post(f"{url}/run_code", json={"code": code, "language": "python"}, timeout=10)
    assert not any(leak in resp.text for leak in ("/root", "Traceback", "worker.py")), resp.text
    assert resp.json()["status"] == "SandboxError"


def test_validation_errors_name_the_field_without_echoing_the_input(fake):
    with serve_in_background(fake) as url:
        body = {"code": "x" * 5000, "language": "python", "run_timeout": -1}
        resp = httpx.post(f"{url}/run_code", json=body, timeout=10)
    assert resp.status_code == 422 and "run_timeout" in resp.text and "xxxxx" not in resp.text


def test_an_oversized_body_is_413(fake):
    with serve_in_background(fake, max_body_bytes=1 << 16) as url:
        big = {"code": "print(1)" + " " * (1 << 17), "language": "python"}
        assert httpx.post(f"{url}/run_code", json=big, timeout=10).status_code == 413
        chunks = (b" " * 8192 for _ in range(16))          # streamed, no Content-Length
        assert httpx.post(f"{url}/run_code", content=chunks, timeout=10).status_code == 413
        fake.release.set()
        assert httpx.post(f"{url}/run_code", json={"code": "ok", "language": "python"},
                          timeout=10).status_code == 200


@pytest.mark.parametrize("sent", [b"", b"POST /run_code HTTP/1.1\r\nHost: x\r\n",
                                  b"POST /run_code HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"co"])
def test_idle_and_partial_connections_time_out(fake, sent):
    with serve_in_background(fake, request_timeout_s=0.5) as url:
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as conn:
            conn.sendall(sent)
            conn.settimeout(5)
            start = time.monotonic()
            assert conn.recv(1024) == b""                     # the server closed it
            assert time.monotonic() - start < 3


def test_the_token_is_checked_on_every_request(fake):
    fake.release.set()
    with serve_in_background(fake, token="s3cret") as url:
        assert httpx.get(f"{url}/v1/ping", timeout=5).status_code == 401
        assert httpx.post(f"{url}/run_code", json={"code": "ok", "language": "python"}, timeout=5,
                          headers={"Authorization": "Bearer wrong"}).status_code == 401
        ok = {"Authorization": "Bearer s3cret"}
        assert httpx.get(f"{url}/v1/ping", headers=ok, timeout=5).json() == "pong"
        assert httpx.post(f"{url}/run_code", json={"code": "ok", "language": "python"}, headers=ok,
                          timeout=5).json()["status"] == "Success"


def test_a_public_bind_needs_a_token_or_insecure(caplog):
    with pytest.raises(ValueError, match="--token"):
        check_bind("0.0.0.0", token=None, insecure=False)
    check_bind("0.0.0.0", token="t", insecure=False)
    check_bind("127.0.0.1", token=None, insecure=False)
    check_bind("::1", token=None, insecure=False)
    check_bind("0.0.0.0", token=None, insecure=True)
    assert "WITHOUT a token" in caplog.text
    result = CliRunner().invoke(cli, ["sandbox", "serve", "--host", "0.0.0.0", "--isolation", "subprocess"],
                                env={"STARE_SANDBOX_TOKEN": ""})
    assert result.exit_code == 2 and "--token" in result.output

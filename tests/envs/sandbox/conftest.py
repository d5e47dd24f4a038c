"""Shared fixtures: one bubblewrap LocalSandbox and one HTTP server for the whole sandbox test run.

Without a usable bubblewrap the isolated tests are skipped with the reason, unless the environment
sets STARE_REQUIRE_BWRAP=1 (CI does), which turns the skip into a failure.
"""

import os
import socket
import threading
import time

import pytest

from envs.sandbox import LocalSandbox, bwrap_problem


def _require_bwrap():
    problem = bwrap_problem()
    if problem:
        if os.environ.get("STARE_REQUIRE_BWRAP") == "1":
            pytest.fail(f"bubblewrap required but unusable: {problem}")
        pytest.skip(f"bubblewrap unusable here: {problem}")


@pytest.fixture(scope="session")
def box():
    _require_bwrap()
    sandbox = LocalSandbox(isolation="bwrap", max_concurrency=4, workers=2)
    yield sandbox
    sandbox.close()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def server_url(box):
    import uvicorn

    from envs.sandbox.server import create_app

    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(box), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)

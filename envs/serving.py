"""Run an ASGI app (the sandbox server, an OpenEnv server) with uvicorn on a background thread."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def serve_app_in_background(app: Any, *, host: str = "127.0.0.1", port: int = 0, start_timeout: float = 30.0,
                            name: str = "the server", **uvicorn_options: Any) -> Iterator[str]:
    """Serve `app` with uvicorn on a daemon thread; yields its base URL (`port=0` picks a free port).

    `uvicorn_options` go to `uvicorn.Config` (e.g. the sandbox server's `http` protocol class).

    For notebooks, tests and benchmarks that want an endpoint in-process (the `stare ... serve` commands
    are the command-line way).

    Raises:
        TimeoutError: uvicorn did not start within `start_timeout` seconds (the message says `name`).
    """
    import uvicorn

    if port == 0:
        with socket.socket() as probe:
            probe.bind((host, 0))
            port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", **uvicorn_options))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            server.should_exit = True
            raise TimeoutError(f"{name} did not start on {host}:{port} within {start_timeout} s")
        time.sleep(0.02)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


__all__ = ["serve_app_in_background"]

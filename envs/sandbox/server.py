"""A SandboxFusion-compatible HTTP server over any sandbox (`stare sandbox serve`).

Wire format: ANCHORS.md (d). ``POST /run_code`` (a trailing slash is accepted), ``POST /run_jupyter``,
``GET /v1/ping`` -> ``"pong"``. Exact field names and enums; additive extras that clients ignore:
``run_result.stdout_truncated``, ``run_result.stderr_truncated`` and top-level ``sandbox_status`` (our
`RunStatus`, the only place ``MemoryLimitExceeded`` is visible on the wire: SandboxFusion itself reports
a Python MemoryError as ``Finished`` with return code 1, and so do we in ``run_result``).

Status rules, as SandboxFusion's: user-code failures (non-zero exit, timeout, memory) are
``"Failed"``; ``"SandboxError"`` is reserved for faults of the sandbox, because clients retry it.
Handlers are plain ``def`` functions, so FastAPI runs them on its thread pool and the sandbox's own
bounded concurrency queues the excess (back-pressure); ``/v1/ping`` is ``async`` and answers on the
event loop, so a burst that fills the thread pool cannot starve the health check.

Exposure (`envs.sandbox.http_guard`): optional bearer token on every request (401), body limit
(413), per-connection request deadline, 422 naming the field (never echoing the input), and no
response ever carries a traceback or a host path (sandbox faults and crashes are logged here and
answered with a generic message).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from envs.sandbox.http_guard import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_REQUEST_TIMEOUT_S,
    GuardMiddleware,
    deadline_protocol,
)
from envs.sandbox.limits import MAX_TIMEOUT_S, check_memory
from envs.sandbox.result import RunResult, RunStatus
from envs.serving import serve_app_in_background

LANGUAGES = Literal[
    "python", "python2", "cpp", "nodejs", "go", "go_test", "java", "php", "csharp", "bash", "typescript",
    "sql", "rust", "cuda", "lua", "R", "perl", "D_ut", "ruby", "scala", "julia", "pytest", "junit",
    "kotlin_script", "jest", "verilog", "python_gpu", "lean", "swift", "racket", "gtest", "react"]
SUPPORTED = ("python", "bash")
log = logging.getLogger(__name__)


def _memory_or_default(value: int) -> int:
    """``memory_limit_MB``: <= 0 selects the server default; a positive value must be a valid limit."""
    if value > 0:
        check_memory(value, "memory_limit_MB")
    return value


Seconds = Annotated[float, Field(gt=0, le=MAX_TIMEOUT_S, allow_inf_nan=False)]
"""A timeout in (0, MAX_TIMEOUT_S] seconds; anything else is HTTP 422 naming the field."""
MemoryLimit = Annotated[int, AfterValidator(_memory_or_default)]
"""``memory_limit_MB``: <= 0 means the server default, else in [MIN_MEMORY_MB, MAX_MEMORY_MB] MiB."""


class RunCodeRequest(BaseModel):
    """SandboxFusion's ``RunCodeRequest``; unknown fields are ignored."""

    model_config = ConfigDict(extra="ignore")
    code: str
    language: LANGUAGES
    compile_timeout: Seconds = 10
    run_timeout: Seconds = 10
    memory_limit_MB: MemoryLimit = -1
    stdin: str | None = None
    files: dict[str, str | None] = Field(default_factory=dict)
    fetch_files: list[str] = Field(default_factory=list)


class RunJupyterRequest(BaseModel):
    """SandboxFusion's ``RunJupyterRequest``; unknown fields are ignored."""

    model_config = ConfigDict(extra="ignore")
    cells: list[str]
    cell_timeout: float = Field(0, ge=0, le=MAX_TIMEOUT_S, allow_inf_nan=False)
    total_timeout: Seconds = 45
    memory_limit_MB: MemoryLimit = -1
    kernel: Literal["python3"] = "python3"
    files: dict[str, str | None] = Field(default_factory=dict)
    fetch_files: list[str] = Field(default_factory=list)


def command_result(result: RunResult) -> dict[str, Any]:
    """A `RunResult` as SandboxFusion's ``CommandRunResult`` (plus truncation flags)."""
    if result.status is RunStatus.SandboxError:
        return {"status": "Error", "execution_time": None, "return_code": None, "stdout": None,
                "stderr": result.stderr}
    timed_out = result.status is RunStatus.TimeLimitExceeded
    return {"status": "TimeLimitExceeded" if timed_out else "Finished",
            "execution_time": result.wall_time, "return_code": None if timed_out else result.return_code,
            "stdout": result.stdout, "stderr": result.stderr, "cpu_time": result.cpu_time,
            "stdout_truncated": result.stdout_truncated, "stderr_truncated": result.stderr_truncated}


def overall_status(result: RunResult) -> str:
    """SandboxFusion's verdict: SandboxError for faults, Failed for any non-success, else Success."""
    if result.status is RunStatus.SandboxError:
        return "SandboxError"
    ok = result.status is RunStatus.Finished and result.return_code == 0
    return "Success" if ok else "Failed"


def _unsupported(request: RunCodeRequest | RunJupyterRequest, language: str) -> JSONResponse | None:
    if language not in SUPPORTED:
        return JSONResponse(status_code=422, content={
            "detail": f"language {language!r} is not supported by this server; supported: {list(SUPPORTED)}"})
    if request.files or request.fetch_files:
        return JSONResponse(status_code=422, content={
            "detail": "`files` and `fetch_files` are not supported by this server yet; send them empty."})
    return None


SANDBOX_FAULT = "[sandbox] the sandbox could not run the code (details are in the server's log)"
"""What a client is told about a sandbox fault: the details may name host paths, so they stay in the log."""


def _public(result: RunResult) -> RunResult:
    """``result`` as a client may see it: a SandboxError's details are logged, not sent."""
    if result.status is not RunStatus.SandboxError:
        return result
    log.error("sandbox server: sandbox fault: %s", result.stderr)
    return RunResult(status=RunStatus.SandboxError, stdout="", stderr=SANDBOX_FAULT, return_code=None,
                     wall_time=result.wall_time)


def create_app(sandbox: Any, *, default_memory_mb: int = 1024, token: str | None = None,
               max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> FastAPI:
    """Build the FastAPI app serving ``sandbox`` (a `LocalSandbox`, `FusionSandbox`, ...).

    Args:
        sandbox: object with ``run(code, *, language, timeout, memory_mb, stdin) -> RunResult`` and,
            for ``/run_jupyter``, ``session()``.
        default_memory_mb: memory limit when a request sends ``memory_limit_MB`` <= 0 or none.
        token: when set, every request must send ``Authorization: Bearer <token>`` (else 401).
        max_body_bytes: larger request bodies get 413.
    """
    check_memory(default_memory_mb, "default_memory_mb")
    app = FastAPI(title="STARE sandbox (SandboxFusion-compatible)")
    app.add_middleware(GuardMiddleware, token=token, max_body_bytes=max_body_bytes)
    pod = os.environ.get("MY_POD_NAME")

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(status_code=422, content={"detail": _field_errors(exc.errors())})

    @app.exception_handler(Exception)
    async def _crash(_: Request, exc: Exception) -> JSONResponse:
        log.error("sandbox server: unhandled error", exc_info=exc)   # the operator's log, never the client
        return JSONResponse(status_code=500, content={"detail": "internal server error (see the server log)"})

    @app.get("/v1/ping")
    async def ping() -> str:   # on the event loop: never queued behind runs in the thread pool
        return "pong"

    @app.post("/run_code")
    @app.post("/run_code/", include_in_schema=False)
    def run_code(request: RunCodeRequest) -> Any:
        bad = _unsupported(request, request.language)
        if bad is not None:
            return bad
        memory = request.memory_limit_MB if request.memory_limit_MB > 0 else default_memory_mb
        try:
            result = sandbox.run(request.code, language=request.language, timeout=request.run_timeout,
                                 memory_mb=memory, stdin=request.stdin or "")
        except Exception as err:  # noqa: BLE001 - a dispatch failure is the sandbox's fault
            result = RunResult(status=RunStatus.SandboxError, stdout="", return_code=None, wall_time=0.0,
                               stderr=f"{type(err).__name__}: {err}")
        result = _public(result)
        status = overall_status(result)
        return {"status": status, "message": result.stderr if status == "SandboxError" else "",
                "compile_result": None, "run_result": command_result(result), "executor_pod_name": pod,
                "files": {}, "sandbox_status": result.status.value}

    @app.post("/run_jupyter")
    @app.post("/run_jupyter/", include_in_schema=False)
    def run_jupyter(request: RunJupyterRequest) -> Any:
        bad = _unsupported(request, "python")
        if bad is not None:
            return bad
        memory = request.memory_limit_MB if request.memory_limit_MB > 0 else default_memory_mb
        return _run_cells(sandbox, request, memory, pod)

    return app


def _run_cells(sandbox: Any, request: RunJupyterRequest, memory_mb: int, pod: str | None) -> dict[str, Any]:
    """Run the cells in one fresh session; every cell runs (errors are recorded, as allow_errors)."""
    start = time.monotonic()
    cells: list[dict[str, Any]] = []
    status, message, timed_out = "Success", "", False
    with sandbox.session() as session:
        for code in request.cells:
            left = request.total_timeout - (time.monotonic() - start)
            limit = min(left, request.cell_timeout) if request.cell_timeout > 0 else left
            if limit <= 0:
                timed_out = True
                break
            result = _public(session.run(code, timeout=limit, memory_mb=memory_mb))
            cells.append({"stdout": result.stdout, "stderr": result.stderr, "display": [],
                          "error": _errors(result)})
            if result.status is RunStatus.SandboxError:
                status, message = "SandboxError", result.stderr
                break
            if result.status is RunStatus.TimeLimitExceeded:
                timed_out = True
                break
    if timed_out:
        status = "Failed"
    driver = {"status": "TimeLimitExceeded" if timed_out else "Finished",
              "execution_time": time.monotonic() - start, "return_code": None if timed_out else 0,
              "stdout": "", "stderr": ""}
    return {"status": status, "message": message, "driver": driver, "cells": cells,
            "executor_pod_name": pod, "files": {}}


def _field_errors(errors: Any) -> list[dict[str, Any]]:
    """Validation errors as ``{"loc", "msg", "type"}``: the field is named, the input is never echoed."""
    return [{"loc": [str(part) for part in err.get("loc", ())], "msg": str(err.get("msg", ""))[:300],
             "type": str(err.get("type", ""))} for err in list(errors)[:20]]


def _errors(result: RunResult) -> list[dict[str, Any]]:
    """Jupyter-style error entries parsed from a cell's traceback (empty when the cell succeeded)."""
    if result.status is RunStatus.Finished and result.return_code == 0:
        return []
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    last = lines[-1] if lines else result.status.value
    name, _, value = last.partition(":")
    return [{"ename": name.strip(), "evalue": value.strip(), "traceback": lines}]


def uvicorn_options(request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S) -> dict[str, Any]:
    """The sandbox server's uvicorn settings: h11, a per-connection request deadline, 5 s keep-alive."""
    return {"http": deadline_protocol(request_timeout_s), "timeout_keep_alive": 5}


def server_config(app: Any, *, host: str, port: int,
                  request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S) -> Any:
    """The uvicorn config `stare sandbox serve` runs ``app`` with (see `uvicorn_options`)."""
    import uvicorn

    options = uvicorn_options(request_timeout_s)
    return uvicorn.Config(app, host=host, port=port, log_level="warning", **options)


def serve_in_background(sandbox: Any, *, host: str = "127.0.0.1", port: int = 0, start_timeout: float = 30.0,
                        token: str | None = None, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
                        ) -> contextlib.AbstractContextManager[str]:
    """Serve `create_app(sandbox)` with uvicorn on a daemon thread; yields the base URL.

    For notebooks and tests that want a SandboxFusion-compatible endpoint in-process (`stare sandbox
    serve` is the command-line way). `port=0` picks a free port. `token`, `max_body_bytes` and
    `request_timeout_s` as in `create_app` / `server_config`.

    Raises:
        TimeoutError: uvicorn did not start within `start_timeout` seconds.
    """
    app = create_app(sandbox, token=token, max_body_bytes=max_body_bytes)
    return serve_app_in_background(app, host=host, port=port, start_timeout=start_timeout,
                                   name="the sandbox server", **uvicorn_options(request_timeout_s))

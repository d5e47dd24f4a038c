"""`FusionSandbox`: the `LocalSandbox` interface over a SandboxFusion server (``sandbox-fusion`` models).

Requests are the client's `RunCodeRequest`, posted with aiohttp on one background event loop (the
client's own `run_code` cannot send headers, so no API token), so many threads can call `run` at
once; at most ``max_concurrency`` requests are in flight (the rest wait: back-pressure). With a token
(``token=`` or ``$STARE_SANDBOX_TOKEN``) every request carries ``Authorization: Bearer <token>``, as
``stare sandbox serve --token`` requires. Retries are bounded and only for faults that a retry can
fix: transport errors, HTTP 5xx and ``SandboxError`` responses (never a 4xx: a wrong token or a bad
request stays wrong). The user's failing code is a normal answer and is never retried.

Status mapping (SandboxFusion -> `RunStatus`):
    run_result.status "TimeLimitExceeded"             -> TimeLimitExceeded
    run_result.status "Finished", last stderr line "MemoryError..." -> MemoryLimitExceeded
    run_result.status "Finished"                      -> Finished (any return code)
    compile failed (no run_result)                    -> Finished with the compiler's output
    "SandboxError" / "Error" / no answer after retries -> SandboxError
"""

from __future__ import annotations

import asyncio
import random
import threading
import time

import aiohttp
from sandbox_fusion import RunCodeRequest, RunCodeResponse

from envs.sandbox.auth import auth_headers, resolve_token
from envs.sandbox.fusion_session import FusionSession
from envs.sandbox.limits import check_memory, check_timeout
from envs.sandbox.result import RunResult, RunStatus


class _ServerAnswer(Exception):
    """The server answered with an error: an HTTP status other than 200, or a SandboxError reply."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


class _Request(RunCodeRequest):
    """The client's request model plus the server's ``memory_limit_MB`` (absent from client 0.3.7)."""

    memory_limit_MB: int = -1


class FusionSandbox:
    """Run code on a SandboxFusion (or ``stare sandbox serve``) server; thread-safe."""

    isolation = "remote"
    """Isolation is whatever the server provides."""

    def __init__(self, endpoint: str, *, max_concurrency: int = 32, max_attempts: int = 3,
                 retry_wait_s: float = 0.5, client_timeout_s: float = 30.0, token: str | None = None):
        """Connect lazily to ``endpoint`` (e.g. ``http://127.0.0.1:8080``; a trailing ``/run_code`` is ok).

        Args:
            endpoint: base URL of the server.
            max_concurrency: requests in flight at most; more callers wait.
            max_attempts: tries per run for transport errors, 5xx and SandboxError (>= 1).
            retry_wait_s: first back-off; doubles per try, with jitter, capped at 8 s.
            client_timeout_s: HTTP time allowed on top of the run's own timeout.
            token: API token sent as ``Authorization: Bearer <token>`` on every request; None reads
                ``$STARE_SANDBOX_TOKEN`` (unset: no header, for a loopback server without a token).

        Raises:
            ValueError: a bad endpoint, ``max_attempts`` or token (named).
        """
        if not endpoint.startswith(("http://", "https://")):
            raise ValueError(f"endpoint={endpoint!r} must be an http(s) URL, e.g. http://127.0.0.1:8080.")
        if max_attempts < 1:
            raise ValueError(f"max_attempts={max_attempts} must be >= 1.")
        endpoint = endpoint.rstrip("/")
        self.endpoint = endpoint[: -len("/run_code")] if endpoint.endswith("/run_code") else endpoint
        self.max_attempts, self.retry_wait_s = max_attempts, retry_wait_s
        self.client_timeout_s = client_timeout_s
        self._headers = auth_headers(resolve_token(token))
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fusion-sandbox", daemon=True)
        self._thread.start()
        self._slots = asyncio.Semaphore(max_concurrency)
        self._closed = False

    def run(self, code: str, *, language: str = "python", timeout: float = 10.0, memory_mb: int = 1024,
            stdin: str = "") -> RunResult:
        """Run ``code`` on the server; arguments and statuses as in `LocalSandbox.run`."""
        if self._closed:
            raise RuntimeError("this FusionSandbox is closed; create a new one.")
        timeout, memory_mb = check_timeout(timeout), check_memory(memory_mb)
        request = _Request(code=code, language=language, run_timeout=timeout, compile_timeout=timeout,
                           stdin=stdin or None, memory_limit_MB=memory_mb)
        return asyncio.run_coroutine_threadsafe(self._run(request, timeout), self._loop).result()

    async def _run(self, request: _Request, timeout: float) -> RunResult:
        start = time.monotonic()
        async with self._slots:
            for attempt in range(1, self.max_attempts + 1):
                try:
                    response = await _post(request, f"{self.endpoint}/run_code", self._headers,
                                           client_timeout=timeout + self.client_timeout_s)
                    return to_run_result(response, time.monotonic() - start)
                except Exception as err:  # noqa: BLE001 - aiohttp and pydantic raise many kinds
                    if attempt == self.max_attempts or not _retryable(err):
                        return RunResult(status=RunStatus.SandboxError, stdout="", return_code=None,
                                         stderr=f"[sandbox] {type(err).__name__}: {err}"[:4000],
                                         wall_time=time.monotonic() - start)
                    backoff = min(8.0, self.retry_wait_s * 2 ** (attempt - 1))
                    await asyncio.sleep(backoff * random.uniform(1, 1.5))
        raise AssertionError("unreachable")

    def session(self) -> FusionSession:
        """An emulated persistent session (replays earlier cells; see `FusionSession`)."""
        return FusionSession(self)

    def close(self) -> None:
        """Stop the background loop (idempotent)."""
        if not self._closed:
            self._closed = True
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)

    def __enter__(self) -> FusionSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FusionSandbox({self.endpoint!r})"


async def _post(request: _Request, url: str, headers: dict[str, str], *, client_timeout: float
                ) -> RunCodeResponse:
    """POST `request` to `url` with `headers`; the parsed reply of a 200 that is not a SandboxError.

    Raises:
        _ServerAnswer: another HTTP status (retryable when 5xx) or a SandboxError reply (retryable).
        aiohttp.ClientError, TimeoutError: transport faults (retryable).
    """
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=client_timeout),
                                     headers=headers) as session, \
            session.post(url, json=request.dict()) as reply:
        if reply.status != 200:
            raise _ServerAnswer(f"the server answered HTTP {reply.status}: {await reply.text()}",
                                retryable=reply.status >= 500)
        response = RunCodeResponse(**(await reply.json()))
    if _value(response.status) == "SandboxError":
        raise _ServerAnswer(f"the server reported a SandboxError: {response.message}", retryable=True)
    return response


def _retryable(err: Exception) -> bool:
    """Transport errors, 5xx and SandboxError are worth another try; 4xx (our request is bad) are not."""
    return err.retryable if isinstance(err, _ServerAnswer) else True


def to_run_result(response: RunCodeResponse, wall: float) -> RunResult:
    """Map a SandboxFusion response to a `RunResult` (see the module docstring)."""
    status = getattr(response.status, "value", response.status)
    run = response.run_result
    if status == "SandboxError" or (run is not None and _value(run.status) == "Error"):
        return RunResult(status=RunStatus.SandboxError, stdout="", return_code=None, wall_time=wall,
                         stderr=response.message or (run.stderr if run else "") or "sandbox error")
    if run is None:  # compilation failed or timed out
        comp = response.compile_result
        timed_out = comp is not None and _value(comp.status) == "TimeLimitExceeded"
        return RunResult(status=RunStatus.TimeLimitExceeded if timed_out else RunStatus.Finished,
                         stdout=(comp.stdout or "") if comp else "",
                         stderr=(comp.stderr or "") if comp else "",
                         return_code=comp.return_code if comp else None, wall_time=wall)
    stderr = run.stderr or ""
    if _value(run.status) == "TimeLimitExceeded":
        status_out = RunStatus.TimeLimitExceeded
    elif run.return_code and _last_line(stderr).startswith("MemoryError"):
        status_out = RunStatus.MemoryLimitExceeded
    else:
        status_out = RunStatus.Finished
    return RunResult(status=status_out, stdout=run.stdout or "", stderr=stderr, return_code=run.return_code,
                     wall_time=run.execution_time if run.execution_time is not None else wall,
                     cpu_time=getattr(run, "cpu_time", None))


def _value(status: object) -> str:
    return getattr(status, "value", status)  # type: ignore[return-value]


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""

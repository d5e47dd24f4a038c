"""A pool of math-verify worker processes with a wall-clock deadline per verification.

math-verify's own timeouts use SIGALRM, which fails off the main thread (and frameworks then scored
everything 0). Here each verification runs in a child process; the parent waits on the result pipe
with a deadline, from any thread, and a verification still running at its deadline is killed with
its worker, which is replaced. The caller gets `verifier_timeout`, never a silent "wrong".

Workers start lazily on first use and are shared process-wide (`shared_pool()`); they exit at
interpreter exit or when the parent dies.
"""

from __future__ import annotations

import atexit
import collections
import math
import os
import pathlib
import pickle
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from multiprocessing.connection import Connection, wait

WORKER_SCRIPT = pathlib.Path(__file__).with_name("verify_worker.py")
WORKERS_ENV = "STARE_VERIFY_WORKERS"
"""Environment variable that sets the size of the shared pool (default: min(4, CPU count))."""

PIPE_SAFE_BYTES = 32_768
"""Payloads up to this size fit in a pipe buffer (64 KiB on Linux) even when the reader is stuck."""

Job = tuple[str, str] | tuple[str, str, str]
"""`(gold, candidate)` for math-verify, or `(gold, candidate, boxed)` for the authors' three checks."""
Result = tuple[str, "str | None"]
"""(status, prediction) for one job: status in correct | wrong | no_answer | verifier_*."""


class _Worker:
    """One child process and its two pipes; `inflight` holds the job indices it still owes."""

    def __init__(self, env: Mapping[str, str] | None) -> None:
        child_in, parent_out = os.pipe()
        parent_in, child_out = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER_SCRIPT), str(child_in), str(child_out)],
            pass_fds=(child_in, child_out), env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL, close_fds=True)
        os.close(child_in)
        os.close(child_out)
        self.send = Connection(parent_out, readable=False)
        self.recv = Connection(parent_in, writable=False)
        self.ready = False
        self.last_message = time.monotonic()
        self.inflight: collections.deque[int] = collections.deque()

    def kill(self) -> None:
        """Kill the process (it may be stuck in C code) and close the pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.send.close()
        self.recv.close()

    def stop(self, grace: float = 1.0) -> None:
        """Ask the worker to exit (EOF on its input), then kill it if it has not."""
        self.send.close()
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.recv.close()


class VerifierPool:
    """Worker processes that run math-verify jobs with a per-job wall-clock deadline.

    Thread-safe: each `verify` call checks workers out of an idle queue, so concurrent callers
    never share a pipe. A job's clock starts when its worker finishes the previous job (or becomes
    ready), so import time and queueing never count against it.
    """

    def __init__(self, workers: int | None = None, *, startup_timeout: float = 120.0,
                 env: Mapping[str, str] | None = None, chunk_size: int = 16) -> None:
        """Create a pool; no process starts until the first `verify` call.

        Args:
            workers: Number of worker processes (default: `$STARE_VERIFY_WORKERS` or min(4, CPUs)).
            startup_timeout: Seconds a new worker may take to import math-verify.
            env: Extra environment variables for the workers (tests use it for hooks).
            chunk_size: Most jobs sent to one worker at a time (pipelining vs balance).
        """
        default = int(os.environ.get(WORKERS_ENV, min(4, os.cpu_count() or 1)))
        self.workers = workers if workers is not None else default
        if self.workers < 1:
            raise ValueError(f"VerifierPool: workers={self.workers}; use at least 1 worker process")
        self.startup_timeout = startup_timeout
        self.chunk_size = chunk_size
        self.restarts = 0
        """Workers killed and replaced (timeouts and crashes) since the pool started."""
        self._env = dict(env or {})
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        self._all: set[_Worker] = set()
        self._lock = threading.Lock()
        self._started = False
        self._closed = False
        self._pid = os.getpid()

    def verify(self, jobs: Sequence[Job], *, timeout: float = 5.0) -> list[Result]:
        """Run `Job`s; each gets at most `timeout` seconds of wall time, all its checks together.

        Returns:
            One `(status, prediction)` per job, in order. A job past its deadline gives
            `("verifier_timeout", None)`; a worker that dies gives `("verifier_error", reason)`.
        """
        if timeout <= 0:
            raise ValueError(f"timeout={timeout}; the per-verification deadline must be > 0 seconds")
        if not jobs:
            return []
        todo = collections.deque(range(len(jobs)))
        results: list[Result | None] = [None] * len(jobs)
        held = self._checkout(math.ceil(len(jobs) / self.chunk_size))
        # at least two chunks per worker, so a worker never waits for the parent between chunks
        chunk = max(1, min(self.chunk_size, math.ceil(len(jobs) / (2 * len(held)))))
        try:
            while todo or any(w.inflight for w in held):
                for worker in held:
                    self._feed(worker, todo, jobs, chunk)
                self._collect(held, results, todo, timeout)
                for i, worker in enumerate(held):
                    if self._overdue(worker, timeout):
                        held[i] = (self._fail_head(worker, results, todo, "verifier_timeout", None)
                                   if worker.inflight else self._replace(worker))
        finally:
            for worker in held:
                self._checkin(worker)
        return results  # type: ignore[return-value]

    def close(self) -> None:
        """Stop every worker. Safe to call twice; later `verify` calls raise."""
        with self._lock:
            self._closed = True
            workers, self._all = list(self._all), set()
        for worker in workers:
            worker.stop()

    # ---- checkout -------------------------------------------------------------------------

    def _checkout(self, wanted: int) -> list[_Worker]:
        with self._lock:
            if self._closed:
                raise RuntimeError("VerifierPool is closed; create a new pool or use shared_pool()")
            if self._pid != os.getpid():
                raise RuntimeError("this VerifierPool belongs to the parent of a forked process; create "
                                   "a new pool in the child (tasks.shared_pool() does so automatically)")
            if not self._started:
                self._started = True
                for _ in range(self.workers):
                    self._idle.put(self._spawn())
        held = [self._idle.get()]  # blocks while other threads hold every worker
        while len(held) < wanted:
            try:
                held.append(self._idle.get_nowait())
            except queue.Empty:
                break
        return held

    def _checkin(self, worker: _Worker) -> None:
        if worker.inflight:  # only after an exception in the caller's thread: state unknown
            worker = self._replace(worker)
        with self._lock:
            closed = self._closed
        if closed:
            worker.stop()
        else:
            self._idle.put(worker)

    def _spawn(self) -> _Worker:
        worker = _Worker(self._env)
        self._all.add(worker)
        return worker

    def _replace(self, worker: _Worker) -> _Worker:
        worker.kill()
        with self._lock:
            self._all.discard(worker)
            self.restarts += 1
            return self._spawn()

    # ---- dispatch -------------------------------------------------------------------------

    def _feed(self, worker: _Worker, todo: collections.deque[int], jobs: Sequence[Job],
              chunk: int) -> None:
        """Send the worker the next `chunk` jobs once it has at most `chunk // 2` left.

        A payload that might not fit in the pipe buffer goes only to a ready, idle worker: writing
        it to a hung worker would block this thread, and the deadline with it.
        """
        if not todo or len(worker.inflight) > chunk // 2:
            return
        indices = [todo.popleft() for _ in range(min(chunk, len(todo)))]
        payload = pickle.dumps([jobs[i] for i in indices], protocol=pickle.HIGHEST_PROTOCOL)
        if len(payload) > PIPE_SAFE_BYTES and (worker.inflight or not worker.ready):
            todo.extendleft(reversed(indices))
            return
        if not worker.inflight:
            worker.last_message = time.monotonic()  # the clock starts when work arrives
        worker.inflight.extend(indices)
        try:
            worker.send.send_bytes(payload)
        except OSError:
            pass  # the worker died; `_collect` sees EOF and fails its head job

    def _deadline(self, worker: _Worker, timeout: float) -> float:
        return worker.last_message + (timeout if worker.ready else self.startup_timeout)

    def _overdue(self, worker: _Worker, timeout: float) -> bool:
        watched = bool(worker.inflight) or not worker.ready
        return watched and time.monotonic() > self._deadline(worker, timeout)

    def _collect(self, held: list[_Worker], results: list[Result | None], todo: collections.deque[int],
                 timeout: float) -> None:
        """Wait until a busy worker answers or the earliest deadline passes; store answers."""
        busy = [w for w in held if w.inflight or not w.ready]
        if not busy:
            return
        soonest = min(self._deadline(w, timeout) for w in busy)
        for conn in wait([w.recv for w in busy], timeout=max(0.0, soonest - time.monotonic())):
            worker = next(w for w in busy if w.recv is conn)
            try:
                while worker.recv.poll():
                    message = worker.recv.recv()
                    worker.last_message = time.monotonic()
                    if message == ("ready",):
                        worker.ready = True
                    else:
                        results[worker.inflight.popleft()] = message
            except (EOFError, OSError):
                code = worker.proc.wait()
                if not worker.ready:  # a setup problem, not a verification: every worker would fail
                    raise RuntimeError(
                        f"a verifier worker exited with code {code} before it was ready (its error is "
                        "printed above); check that `python -c 'import math_verify'` works") from None
                held[held.index(worker)] = (self._fail_head(
                    worker, results, todo, "verifier_error", f"verifier worker died (exit code {code})")
                    if worker.inflight else self._replace(worker))

    def _fail_head(self, worker: _Worker, results: list[Result | None], todo: collections.deque[int],
                   status: str, detail: str | None) -> _Worker:
        """Give the job being run `status`, put the rest back in front of `todo`, return a fresh worker."""
        results[worker.inflight.popleft()] = (status, detail)
        todo.extendleft(reversed(worker.inflight))
        worker.inflight.clear()
        return self._replace(worker)


_shared: VerifierPool | None = None
_shared_lock = threading.Lock()


def shared_pool() -> VerifierPool:
    """The process-wide pool used by `tasks.grade*` (created lazily, closed at exit)."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared._closed or _shared._pid != os.getpid():
            _shared = VerifierPool()
            atexit.register(_shared.close)
        return _shared

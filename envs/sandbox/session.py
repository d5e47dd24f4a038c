"""`LocalSession`: one persistent interpreter in its own sandbox, like a notebook kernel.

Semantics: every `run` executes in the same Python namespace, so names defined by one call are
visible in the next; files written under the working directory persist too. When the last statement
of a cell is an expression, its ``repr`` is printed (as a notebook shows it). Processes a cell starts
are killed when the cell ends. A timeout, or code that ends the interpreter (``os._exit``, a fatal
signal), kills the kernel: that result says so in its stderr, and the next `run` starts an empty one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace

from envs.sandbox.limits import check_memory, check_timeout
from envs.sandbox.result import RunResult, RunStatus
from envs.sandbox.worker import SandboxStartError, Worker


class LocalSession:
    """A persistent interpreter (obtain it with `LocalSandbox.session()`); calls are serialised."""

    def __init__(self, *, spawn: Callable[[], Worker], limits: Callable[..., dict], output_limit: int,
                 on_close: Callable[[LocalSession], None]):
        """Wire a session to its sandbox without importing it.

        Args:
            spawn: starts a session interpreter (a spare one when ready).
            limits: ``limits(timeout=, memory_mb=)`` -> the rlimits of a cell.
            output_limit: bytes kept per stream.
            on_close: frees the session's slot.
        """
        self._spawn, self._limits, self._output_limit = spawn, limits, output_limit
        self._on_close = on_close
        self._worker: Worker | None = None
        self._lock = threading.Lock()
        self.closed = False
        self.restarts = 0
        """How many times the kernel died and was started again."""

    def run(self, code: str, *, timeout: float = 10.0, memory_mb: int = 1024, stdin: str = "") -> RunResult:
        """Run one cell in the persistent namespace; arguments and statuses as in `LocalSandbox.run`."""
        check_timeout(timeout)
        check_memory(memory_mb)
        with self._lock:
            if self.closed:
                raise RuntimeError("this session is closed; open a new one with sandbox.session().")
            if self._worker is None or not self._worker.alive:
                if self._worker is not None:
                    self.restarts += 1
                    self._worker.kill()
                try:
                    self._worker = self._spawn()
                except SandboxStartError as err:
                    self._worker = None
                    return RunResult(status=RunStatus.SandboxError, stdout="", stderr=f"[sandbox] {err}",
                                     return_code=None, wall_time=0.0)
            result = self._worker.run(code, stdin=stdin, timeout=timeout,
                                      limits=self._limits(timeout=timeout, memory_mb=memory_mb),
                                      output_limit=self._output_limit)
            if result.status is RunStatus.TimeLimitExceeded and not self._worker.alive:
                result = _with_note(result, "[sandbox] the time limit killed the session; "
                                            "the next call starts an empty one.")
            return result

    def close(self) -> None:
        """Kill the kernel and free the session slot (idempotent)."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            if self._worker is not None:
                self._worker.kill()
                self._worker = None
        self._on_close(self)

    def __enter__(self) -> LocalSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _with_note(result: RunResult, note: str) -> RunResult:
    stderr = f"{result.stderr}\n{note}" if result.stderr else note
    return replace(result, stderr=stderr)

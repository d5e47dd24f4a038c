"""`LocalSandbox`: isolated, warm, bounded code execution on this machine (no Docker needed).

Isolation (``isolation="bwrap"``, the default when bubblewrap works): each worker is a bubblewrap
sandbox with every namespace unshared (no network: only a down loopback; own PID, IPC, UTS, user
and cgroup namespaces), a read-only view of ``/usr`` only (no home directory, no checkout, no
``/etc`` beyond the linker cache and alternatives), a private size-capped tmpfs ``/tmp``, a cleared
environment, and a new session. On a root host each worker also runs as its own unused uid, so
the per-run ``RLIMIT_NPROC`` binds (the kernel ignores it for root). Per run: wall-clock limit
(host side), ``RLIMIT_AS`` (memory), ``RLIMIT_CPU``, ``RLIMIT_NPROC``, ``RLIMIT_FSIZE``,
``RLIMIT_NOFILE`` and an output cap per stream. After every run all processes the run started,
including ones that called ``setsid``, are killed and reaped before ``run`` returns.

``isolation="subprocess"`` is the weaker opt-in: same limits, no namespaces (the code sees the
network and the file system with the worker's uid; ``setsid`` escapees are only caught on a root
host, through the worker's private uid).
"""

from __future__ import annotations

import atexit
import dataclasses
import itertools
import logging
import math
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass

from envs.sandbox.launch import SANDBOX_TMP, WorkerSpec, resolve_isolation
from envs.sandbox.limits import check_memory, check_timeout
from envs.sandbox.pool import SpareWorkers, Spawner, WorkerPool
from envs.sandbox.result import RunResult, RunStatus
from envs.sandbox.session import LocalSession
from envs.sandbox.worker import SandboxStartError, Worker

log = logging.getLogger(__name__)
LANGUAGES = ("python", "bash")
DEFAULT_PRELOAD = ("math", "json", "re", "collections", "itertools", "functools", "fractions",
                   "decimal", "random", "statistics", "string", "heapq", "bisect", "datetime", "typing")
_UID_BASE = 200_000 + (os.getpid() % 4_000) * 1_000
_uid_counter = itertools.count()


def _python_default() -> str:
    return "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else "python3"


@dataclass(frozen=True, kw_only=True)
class LocalSandboxConfig:
    """Settings of a `LocalSandbox` (every field is also a keyword argument of `LocalSandbox`)."""

    isolation: str = "auto"
    """"auto" (bubblewrap, or an error saying how to install it), "bwrap", or the weaker "subprocess"."""
    workers: int | None = None
    """Warm workers started at once; None = min(4, max_concurrency)."""
    max_concurrency: int | None = None
    """Runs executing at the same time; more callers wait in line. None = max(2, 2 x CPU cores)."""
    max_sessions: int = 64
    """Live persistent sessions at most (~16 MB RSS each); `session()` waits `session_wait_s` for one.
    Resizable at run time with `LocalSandbox.set_max_sessions` / `reserve_sessions`."""
    session_wait_s: float = 60.0
    """How long `session()` waits for a session slot before raising `SessionLimitError`."""
    spare_sessions: int = 2
    """Session interpreters kept started in advance, so a new session's first cell starts at once."""
    warm: bool = True
    """Keep workers between runs; False starts a fresh sandbox for every run (slower, the cold path)."""
    python: str | None = None
    """Interpreter for user code; None = Debian's /usr/bin/python3 (readable by the sandbox uid)."""
    ro_binds: tuple[str, ...] = ()
    """Extra host paths shown read-only inside the sandbox (e.g. the prefix of `python`)."""
    preload: tuple[str, ...] = DEFAULT_PRELOAD
    """Modules each worker imports once so runs do not pay for them."""
    output_limit_bytes: int = 1 << 20
    """Bytes kept per stream (stdout, stderr); the rest is read and discarded, and flagged truncated."""
    max_processes: int = 64
    """RLIMIT_NPROC per run (binds only for a non-root uid: each worker gets its own on a root host)."""
    max_file_mb: int = 64
    """RLIMIT_FSIZE: largest file the code may write."""
    max_open_files: int = 256
    """RLIMIT_NOFILE."""
    tmp_size_mb: int = 256
    """Size cap of the private /tmp of each bubblewrap worker."""
    tmp_inodes: int = 8192
    """Files and directories the private /tmp of a bubblewrap worker holds at most (more: ENOSPC)."""

    def __post_init__(self) -> None:
        if self.spare_sessions < 0:
            raise ValueError(f"spare_sessions={self.spare_sessions} must be >= 0.")
        for name in ("max_sessions", "output_limit_bytes", "max_processes", "max_file_mb",
                     "max_open_files", "tmp_size_mb", "tmp_inodes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1.")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError(f"max_concurrency={self.max_concurrency} must be >= 1 (or None for auto).")

    @property
    def concurrency(self) -> int:
        """The resolved `max_concurrency`."""
        return self.max_concurrency or max(2, 2 * (os.cpu_count() or 1))

    @property
    def prestart(self) -> int:
        """The resolved `workers`."""
        return min(self.concurrency, self.workers if self.workers is not None else 4)


class SessionLimitError(RuntimeError):
    """`max_sessions` sessions are live and none was closed within `session_wait_s`."""


class LocalSandbox:
    r"""Run untrusted code in isolated, warm, rlimited workers; thread-safe; see the module docstring.

    Example:
        >>> with LocalSandbox() as box:
        ...     box.run("print(6 * 7)").stdout
        '42\\n'
    """

    def __init__(self, **settings: object):
        """Start the sandbox; keyword arguments are the fields of `LocalSandboxConfig`.

        Raises:
            IsolationUnavailable: bubblewrap is missing or unusable and isolation was not "subprocess".
        """
        self.config = LocalSandboxConfig(**settings)  # type: ignore[arg-type]
        self.isolation = resolve_isolation(self.config.isolation)
        if self.isolation == "subprocess":
            log.warning("LocalSandbox(isolation='subprocess'): code runs WITHOUT namespaces (network and "
                        "file system visible). Install bubblewrap for isolation.")
        self._closed = False
        self._lock = threading.Lock()
        self._slot_freed = threading.Condition(self._lock)
        """Notified when a session closes or the cap grows (guards `_sessions` and the cap)."""
        self._sessions: set[LocalSession] = set()
        self._tmpdirs: list[str] = []
        self._spawner = Spawner(threads=min(8, self.config.concurrency))
        self._pool = WorkerPool(lambda: self._new_worker("fork"), self._spawner,
                                size=self.config.concurrency, prestart=self.config.prestart,
                                warm=self.config.warm)
        self._spare_sessions = SpareWorkers(lambda: self._new_worker("session"), self._spawner,
                                            count=self.config.spare_sessions)

    # ---- workers ------------------------------------------------------------------------------
    def _new_worker(self, mode: str) -> Worker:
        uid = _UID_BASE + next(_uid_counter) % 1_000 if os.geteuid() == 0 else None
        workdir = SANDBOX_TMP
        if self.isolation != "bwrap":  # a private host temp dir, owned by the worker's uid
            workdir = tempfile.mkdtemp(prefix="stare-sandbox-")
            if uid is not None:
                os.chown(workdir, uid, uid)
            with self._lock:
                self._tmpdirs.append(workdir)
        spec = WorkerSpec(isolation=self.isolation, mode=mode, python=self.config.python or _python_default(),
                          uid=uid, tmp_size_mb=self.config.tmp_size_mb, tmp_inodes=self.config.tmp_inodes,
                          workdir=workdir,
                          ro_binds=self.config.ro_binds,
                          preload=self.config.preload if self.config.warm or mode == "session" else ())
        return Worker(spec)

    def limits(self, *, timeout: float, memory_mb: int) -> dict:
        """The rlimits sent with a run (CPU time: the wall limit rounded up, plus one second)."""
        # RLIMIT_NPROC counts every process of the uid: only meaningful when workers have their own uid
        # (root host) or their own user namespace (bwrap)
        own_uid = self.isolation == "bwrap" or os.geteuid() == 0
        return {"memory_mb": memory_mb, "cpu_s": math.ceil(timeout) + 1,
                "nproc": self.config.max_processes if own_uid else None,
                "fsize_mb": self.config.max_file_mb, "nofile": self.config.max_open_files}

    @staticmethod
    def check_args(language: str, timeout: float, memory_mb: int) -> None:
        """Raise ValueError naming the bad argument (a caller's mistake, not the code's).

        Bounds (`envs.sandbox.limits`): 0 < timeout <= 3600 s, 16 <= memory_mb <= 65536 (an int).
        """
        if language not in LANGUAGES:
            raise ValueError(f"language={language!r} is not supported by LocalSandbox; "
                             f"use one of {LANGUAGES}.")
        check_timeout(timeout)
        check_memory(memory_mb)

    # ---- public API ---------------------------------------------------------------------------
    def run(self, code: str, *, language: str = "python", timeout: float = 10.0, memory_mb: int = 1024,
            stdin: str = "") -> RunResult:
        """Run ``code`` as a fresh program and report how it ended.

        Args:
            code: program text (Python 3, or a bash script with ``language="bash"``).
            language: "python" or "bash".
            timeout: wall-clock seconds from launch (also sets RLIMIT_CPU to ceil(timeout) + 1).
            memory_mb: address-space limit (RLIMIT_AS) in MiB.
            stdin: text fed to the program's standard input.

        Returns:
            RunResult: ``Finished`` (any exit code; a crash is Finished with its code),
            ``TimeLimitExceeded``, ``MemoryLimitExceeded`` (MemoryError in the program) or
            ``SandboxError`` (a fault of the sandbox only).

        Blocks while ``max_concurrency`` runs are in flight (queueing, never failing for load).
        """
        self.check_args(language, timeout, memory_mb)
        start = time.monotonic()
        try:
            worker = self._pool.acquire()
        except SandboxStartError as err:  # the sandbox's fault: reported, never blamed on the code
            return RunResult(status=RunStatus.SandboxError, stdout="", stderr=f"[sandbox] {err}",
                             return_code=None, wall_time=time.monotonic() - start)
        try:
            return worker.run(code, stdin=stdin, limits=self.limits(timeout=timeout, memory_mb=memory_mb),
                              timeout=timeout, output_limit=self.config.output_limit_bytes, language=language)
        finally:
            self._pool.release(worker)

    def session(self) -> LocalSession:
        """Open a persistent interpreter (variables survive between its runs); close it when done.

        Waits while ``sessions_in_use >= max_sessions`` (a close or a larger cap wakes it).

        Raises:
            SessionLimitError: ``max_sessions`` are open and none closed within ``session_wait_s``.
        """
        with self._slot_freed:
            has_slot = self._slot_freed.wait_for(
                lambda: self._closed or len(self._sessions) < self.config.max_sessions,
                timeout=self.config.session_wait_s)
            if self._closed:
                raise RuntimeError("the sandbox is closed; create a new LocalSandbox.")
            if not has_slot:
                raise SessionLimitError(
                    f"max_sessions={self.config.max_sessions} sessions are open and none was closed within "
                    f"{self.config.session_wait_s}s; close() finished sessions or raise the cap with "
                    f"reserve_sessions(n) / set_max_sessions(n) (rollout.max_live_episodes chunks episodes).")
            session = LocalSession(spawn=self._spawn_session_worker, limits=self.limits,
                                   output_limit=self.config.output_limit_bytes, on_close=self._session_closed)
            self._sessions.add(session)
        return session

    def _session_closed(self, session: LocalSession) -> None:
        with self._slot_freed:
            self._sessions.discard(session)
            self._slot_freed.notify()

    @property
    def max_sessions(self) -> int:
        """The current session cap."""
        return self.config.max_sessions

    @property
    def sessions_in_use(self) -> int:
        """Sessions open now (opened and not yet closed)."""
        with self._lock:
            return len(self._sessions)

    def set_max_sessions(self, n: int) -> None:
        """Resize the session cap, at any time, from any thread.

        Growing wakes callers waiting in `session()` at once. Shrinking never closes a session: with
        u sessions in use and a new cap n < u, the cap is deferred, not refused: the u sessions keep
        running and `session()` waits until fewer than n are open (u - n + 1 closes).

        Args:
            n: The new cap, >= 1.

        Raises:
            ValueError: n < 1.
        """
        with self._slot_freed:
            self._set_cap(n)

    def reserve_sessions(self, n: int) -> int:
        """Grow the session cap to at least `n` (never shrinks it); thread-safe.

        Args:
            n: Sessions the caller may hold at once (e.g. the live episodes of a rollout call).

        Returns:
            The cap after the call, max(previous cap, n).
        """
        with self._slot_freed:
            if n > self.config.max_sessions:
                self._set_cap(n)
            return self.config.max_sessions

    def _set_cap(self, n: int) -> None:
        """Set the cap and wake every waiter (the caller holds `_slot_freed`)."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"max_sessions={n!r} must be an int >= 1.")
        self.config = dataclasses.replace(self.config, max_sessions=n)
        self._slot_freed.notify_all()

    # internal hooks used by LocalSession
    def _spawn_session_worker(self) -> Worker:
        """A started session interpreter: a spare one if ready (then a replacement is started)."""
        return self._spare_sessions.take()

    def close(self) -> None:
        """Kill every worker and session (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            sessions = list(self._sessions)
            self._slot_freed.notify_all()   # waiters in session() raise "closed"
        for session in sessions:
            session.close()
        self._pool.close()
        self._spare_sessions.close()
        self._spawner.stop()
        for path in self._tmpdirs:
            _rmtree_quiet(path)

    def __enter__(self) -> LocalSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LocalSandbox(isolation={self.isolation!r}, max_concurrency={self.config.concurrency})"


def _rmtree_quiet(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


_shared: LocalSandbox | None = None
_shared_lock = threading.Lock()
_shared_reserved = 0
"""Sessions reserved by `reserve_shared_sessions` before the shared sandbox exists."""


def shared_local_sandbox(**settings: object) -> LocalSandbox:
    """The process-wide `LocalSandbox` (created on first use; closed at exit).

    Many environments share it so that 64 envs do not start 64 worker pools. ``settings`` apply only
    to the first call; later calls with different settings raise ValueError, except ``max_sessions``,
    which grows the existing sandbox's cap (`LocalSandbox.reserve_sessions`). The cap starts at
    max(max_sessions, sessions reserved earlier with `reserve_shared_sessions`).
    """
    global _shared
    with _shared_lock:
        if _shared is None or _shared._closed:
            config = LocalSandboxConfig(**settings)  # type: ignore[arg-type]
            _shared = LocalSandbox(**{**settings, "max_sessions": max(config.max_sessions, _shared_reserved)})
            atexit.register(_shared.close)
            return _shared
        if settings:
            wanted = LocalSandboxConfig(**settings)  # type: ignore[arg-type]
            if dataclasses.replace(wanted, max_sessions=_shared.max_sessions) != _shared.config:
                raise ValueError("shared_local_sandbox() already exists with other settings "
                                 f"({_shared.config}); build your own LocalSandbox(...) instead.")
            if "max_sessions" in settings:
                _shared.reserve_sessions(wanted.max_sessions)
        return _shared


def reserve_shared_sessions(n: int) -> int:
    """Make room for `n` sessions at once in the process-wide sandbox, without creating it.

    If `shared_local_sandbox()` exists, its cap grows to at least `n` now; otherwise `n` is
    remembered and applied when it is first created. A process whose envs never use the local
    sandbox pays nothing (no sandbox is started). Never shrinks a cap.

    Args:
        n: Sessions that may be open together (e.g. the live episodes of one rollout call).

    Returns:
        The cap the shared sandbox has (or will start with, at least).
    """
    global _shared_reserved
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"reserve_shared_sessions(n={n!r}): n must be an int >= 0.")
    with _shared_lock:
        _shared_reserved = max(_shared_reserved, n)
        if _shared is not None and not _shared._closed:
            return _shared.reserve_sessions(max(1, n))
        return max(LocalSandboxConfig.max_sessions, _shared_reserved)

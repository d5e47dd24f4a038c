"""A bounded pool of warm workers, started on long-lived spawner threads.

Why spawner threads: bubblewrap's ``--die-with-parent`` uses ``PR_SET_PDEATHSIG``, which fires when
the *thread* that forked the sandbox exits. Forking from a short-lived caller thread (a thread pool,
a web server's worker) would kill its sandboxes with it, so every worker is started here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from envs.sandbox.worker import Worker


class Spawner:
    """Runs worker constructors on a few long-lived daemon threads that live as long as the sandbox.

    `ThreadPoolExecutor` threads never exit before `shutdown`, which is exactly the lifetime needed.
    """

    def __init__(self, threads: int = 1) -> None:
        self._pool = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="sandbox-spawner")
        self._stopped = False

    def submit(self, fn: Callable[[], Worker]) -> Future:
        """Queue ``fn`` for a spawner thread; returns its future.

        Raises:
            RuntimeError: the spawner was stopped (the sandbox is closed).
        """
        if self._stopped:
            raise RuntimeError("the sandbox is closed; create a new LocalSandbox.")
        try:
            return self._pool.submit(fn)
        except RuntimeError as err:  # shut down between the check and the submit
            raise RuntimeError("the sandbox is closed; create a new LocalSandbox.") from err

    def call(self, fn: Callable[[], Worker]) -> Worker:
        """Run ``fn`` on a spawner thread and wait for its result (re-raising its error)."""
        return self.submit(fn).result()

    def stop(self) -> None:
        """Let the threads finish the queued jobs and exit."""
        self._stopped = True
        self._pool.shutdown(wait=False)


class WorkerPool:
    """At most ``size`` fork-mode workers; ``acquire`` blocks while all are busy (back-pressure).

    ``warm`` keeps each worker for the next run (replacing dead ones in the background); without it
    every run gets a freshly started worker that is killed afterwards (the "cold" path).
    """

    def __init__(self, factory: Callable[[], Worker], spawner: Spawner, *, size: int, prestart: int,
                 warm: bool = True):
        """Start ``prestart`` workers now (the first synchronously, so setup errors surface here)."""
        self._factory, self._spawner, self._warm = factory, spawner, warm
        self._slots = threading.BoundedSemaphore(size)
        self._size = size
        self._idle: list[Worker] = []
        self._lock = threading.Lock()
        self._closed = False
        if warm and prestart > 0:
            self._idle.append(spawner.call(factory))
            for _ in range(prestart - 1):
                spawner.submit(self._refill)

    def _refill(self) -> None:
        worker = self._factory()
        with self._lock:
            if self._closed or len(self._idle) >= self._size:
                worker.kill()
            else:
                self._idle.append(worker)

    def acquire(self) -> Worker:
        """Wait for a free slot and return a ready worker (started now if none is idle)."""
        self._slots.acquire()
        try:
            with self._lock:
                if self._closed:
                    raise RuntimeError("the sandbox is closed; create a new LocalSandbox.")
                worker = self._idle.pop() if self._warm and self._idle else None
            if worker is None or not worker.alive:
                if worker is not None:
                    worker.kill()
                worker = self._spawner.call(self._factory)
            return worker
        except BaseException:
            self._slots.release()
            raise

    def release(self, worker: Worker) -> None:
        """Give a worker back after a run (a dead one is replaced in the background)."""
        try:
            with self._lock:
                keep = self._warm and not self._closed and worker.alive
                if keep:
                    self._idle.append(worker)
            if not keep:
                worker.kill()
                if self._warm and not self._closed:
                    try:
                        self._spawner.submit(self._refill)
                    except RuntimeError:  # closed meanwhile
                        pass
        finally:
            self._slots.release()

    def close(self) -> None:
        """Kill the idle workers; busy ones are killed when released (idempotent)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.kill()


class SpareWorkers:
    """Up to ``count`` started workers waiting to be handed over (session interpreters).

    `take` returns a ready one at once when there is one, and starts its replacement in the background.
    """

    def __init__(self, factory: Callable[[], Worker], spawner: Spawner, *, count: int):
        """Start ``count`` spares in the background."""
        self._factory, self._spawner, self._count = factory, spawner, count
        self._ready: list[Worker] = []
        self._lock = threading.Lock()
        self._closed = False
        for _ in range(count):
            spawner.submit(self._refill)

    def _refill(self) -> None:
        worker = self._factory()
        with self._lock:
            keep = not self._closed and len(self._ready) < self._count
            if keep:
                self._ready.append(worker)
        if not keep:
            worker.kill()

    def take(self) -> Worker:
        """A started worker (spare if ready, else started now); the caller owns it."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the sandbox is closed; create a new LocalSandbox.")
            worker = self._ready.pop() if self._ready else None
        if self._count:
            try:
                self._spawner.submit(self._refill)
            except RuntimeError:  # closed meanwhile
                pass
        if worker is not None and worker.alive:
            return worker
        if worker is not None:
            worker.kill()
        return self._spawner.call(self._factory)

    def close(self) -> None:
        """Kill the spares (idempotent)."""
        with self._lock:
            self._closed = True
            ready, self._ready = self._ready, []
        for worker in ready:
            worker.kill()

"""`LazyLocalSandbox`: a private `LocalSandbox` that its owner sizes and that starts on first use."""

from __future__ import annotations

import atexit
import dataclasses
import threading
from typing import Any

from envs.sandbox.local import LocalSandbox, LocalSandboxConfig
from envs.sandbox.result import RunResult
from envs.sandbox.session import LocalSession


class LazyLocalSandbox:
    """A `LocalSandbox` started by the first `run` or `session` call: none at all if no code runs.

    Made for one owner that hands it to its envs explicitly (`envs.make(..., sandbox=box)`), sizes it
    with `reserve_sessions` and closes it: a training run builds one at setup, passes it to every env
    it makes, and grows its cap to the episodes each rollout call plays. Unlike
    `shared_local_sandbox()`, no other code in the process sees or changes it.

    Example:
        >>> box = LazyLocalSandbox(isolation="subprocess")
        >>> box.reserve_sessions(100), box.started
        (100, False)
        >>> box.close()
    """

    def __init__(self, **settings: Any) -> None:
        """Keyword arguments are the fields of `LocalSandboxConfig`, checked now; nothing starts."""
        self._config = LocalSandboxConfig(**settings)
        self._settings = settings
        self._box: LocalSandbox | None = None
        self._closed = False
        self._lock = threading.Lock()

    @property
    def started(self) -> bool:
        """Whether the underlying `LocalSandbox` has been started."""
        return self._box is not None

    @property
    def max_sessions(self) -> int:
        """The session cap (of the started sandbox, or the one it will start with)."""
        box = self._box
        return box.max_sessions if box is not None else self._config.max_sessions

    def reserve_sessions(self, n: int) -> int:
        """Make room for `n` sessions at once: grow the cap to at least `n`, never shrink it.

        Applied now to a started sandbox (waking callers waiting for a slot), otherwise at start.

        Args:
            n: Sessions that may be open together (e.g. the live episodes of one rollout call), >= 0.

        Returns:
            The cap after the call, max(previous cap, n).
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"reserve_sessions(n={n!r}): n must be an int >= 0.")
        with self._lock:
            if self._box is not None:
                return self._box.reserve_sessions(n)
            if n > self._config.max_sessions:
                self._config = dataclasses.replace(self._config, max_sessions=n)
            return self._config.max_sessions

    def sandbox(self) -> LocalSandbox:
        """The started `LocalSandbox` (started by this call the first time; closed at exit at the latest).

        Raises:
            RuntimeError: after `close()`.
            IsolationUnavailable: bubblewrap is missing or unusable and isolation was not "subprocess".
        """
        with self._lock:
            if self._closed:
                raise RuntimeError("this LazyLocalSandbox is closed; create a new one.")
            if self._box is None:
                self._box = LocalSandbox(**{**self._settings, "max_sessions": self._config.max_sessions})
                atexit.register(self._box.close)
            return self._box

    def run(self, code: str, **kwargs: Any) -> RunResult:
        """`LocalSandbox.run(code, **kwargs)` on the started sandbox."""
        return self.sandbox().run(code, **kwargs)

    def session(self) -> LocalSession:
        """`LocalSandbox.session()` on the started sandbox."""
        return self.sandbox().session()

    def close(self) -> None:
        """Close the sandbox if it was started (idempotent); later `run` / `session` calls raise."""
        with self._lock:
            self._closed, box = True, self._box
        if box is not None:
            box.close()

    def __enter__(self) -> LazyLocalSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LazyLocalSandbox(started={self.started}, max_sessions={self.max_sessions})"

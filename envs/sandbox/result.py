"""The result record every sandbox backend returns."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class RunStatus(str, Enum):
    """How a run ended. `SandboxError` is only for faults of the sandbox itself."""

    Finished = "Finished"
    """The program exited by itself (any return code: a crash of the user's code is Finished)."""
    TimeLimitExceeded = "TimeLimitExceeded"
    """Killed at the wall-clock or CPU-time limit."""
    MemoryLimitExceeded = "MemoryLimitExceeded"
    """Ran out of its memory limit."""
    SandboxError = "SandboxError"
    """The sandbox could not run the code (launcher failure, server down). Never the user's fault."""


@dataclass(frozen=True)
class RunResult:
    """What happened when one program ran."""

    status: RunStatus
    stdout: str
    stderr: str
    return_code: int | None
    """Exit code; negative means killed by that signal; None when it never exited normally."""
    wall_time: float
    """Seconds from launch to exit or kill."""
    stdout_truncated: bool = False
    """True when stdout exceeded the output cap and was cut."""
    stderr_truncated: bool = False
    """True when stderr exceeded the output cap and was cut."""
    cpu_time: float | None = None
    """CPU seconds (user + system) the program used, when the backend reports it."""

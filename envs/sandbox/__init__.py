"""Sandboxed code execution: `LocalSandbox` (bubblewrap, warm pool), `FusionSandbox` (SandboxFusion).

Both return `RunResult` with a `RunStatus` in ``Finished | TimeLimitExceeded | MemoryLimitExceeded |
SandboxError``; ``SandboxError`` is only for faults of the sandbox itself. See docs/sandbox.md.
"""

from envs.sandbox.factory import make_sandbox
from envs.sandbox.fusion import FusionSandbox
from envs.sandbox.fusion_session import FusionSession
from envs.sandbox.launch import INSTALL_HINT, IsolationUnavailable, bwrap_problem
from envs.sandbox.lazy import LazyLocalSandbox
from envs.sandbox.local import (
    LocalSandbox,
    LocalSandboxConfig,
    SessionLimitError,
    reserve_shared_sessions,
    shared_local_sandbox,
)
from envs.sandbox.result import RunResult, RunStatus
from envs.sandbox.session import LocalSession
from envs.sandbox.worker import SandboxStartError

SandboxSession = LocalSession
"""Alias: the session type returned by `LocalSandbox.session()`."""

__all__ = [
    "INSTALL_HINT", "FusionSandbox", "FusionSession", "IsolationUnavailable", "LazyLocalSandbox",
    "LocalSandbox",
    "LocalSandboxConfig", "LocalSession", "RunResult", "RunStatus", "SandboxSession", "SandboxStartError",
    "SessionLimitError", "bwrap_problem", "make_sandbox", "reserve_shared_sessions", "shared_local_sandbox",
]

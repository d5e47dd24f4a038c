"""`make_sandbox`: one switch between the local sandbox and a SandboxFusion fleet."""

from __future__ import annotations

from typing import Any

from envs.sandbox.fusion import FusionSandbox
from envs.sandbox.local import LocalSandbox, shared_local_sandbox


def make_sandbox(spec: Any = "local") -> Any:
    """Resolve a sandbox spec to a sandbox object.

    Args:
        spec: ``"local"`` -> the process-wide `shared_local_sandbox()` (one worker pool for all envs);
            an ``http(s)://`` URL -> `FusionSandbox(spec)`; an object with a ``run`` method (a
            `LocalSandbox`, `FusionSandbox` or your own) -> itself.

    Raises:
        ValueError: any other value, with the accepted forms.
    """
    if isinstance(spec, str):
        if spec == "local":
            return shared_local_sandbox()
        if spec.startswith(("http://", "https://")):
            return FusionSandbox(spec)
    elif callable(getattr(spec, "run", None)):
        return spec
    raise ValueError(f"sandbox={spec!r}: use 'local', an http(s):// SandboxFusion URL, or a sandbox object "
                     f"such as LocalSandbox(...).")


__all__ = ["FusionSandbox", "LocalSandbox", "make_sandbox", "shared_local_sandbox"]

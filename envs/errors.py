"""Every exception `envs/` raises on purpose, in one place (STYLE rule 9).

Model mistakes never raise out of `step()`: tools raise `ToolError`, the `ToolSet` turns it into an
observation. World failures raise `EpisodeError` (the rollout loop records the trajectory as failed).
Programmer and config mistakes raise `ValueError`/`TypeError` subclasses at once.
"""

from __future__ import annotations


class EnvError(Exception):
    """Base class for everything envs/ raises on purpose."""


class ToolError(EnvError):
    """A tool call failed because of the model's input; the message is shown to the model.

    Raise it from a tool function; the `ToolSet` catches it and returns `str(err)` as the tool
    message. It never ends the episode.

    Args:
        message: Short text the model sees (e.g. "no person named 'Bob'").
        kind: Error kind counted in `info["error_kinds"]` (e.g. "not_found", "timeout").
    """

    def __init__(self, message: str, *, kind: str = "tool_error") -> None:
        super().__init__(message)
        self.kind = kind


class EpisodeError(EnvError):
    """The episode cannot continue for a reason outside the model's control (sandbox down, tool bug)."""


class ToolCrashed(EpisodeError):
    """A tool raised something other than `ToolError`: a bug or an infrastructure fault, not the model's."""


class SandboxUnavailable(EpisodeError):
    """The code sandbox could not run the program (its own fault, never the user's code)."""


class RemoteEnvError(EpisodeError):
    """A remote env or tool server failed: unreachable, timed out, broke the protocol or sent too much.

    The message names the server and the call. Raised from `step()`/`reset()`, it is a world failure
    (the rollout loop records the episode as failed), exactly like `SandboxUnavailable`.
    """


class ResetNeeded(EnvError, RuntimeError):
    """`step()` was called before `reset()` or after the episode ended."""


class UnknownEnvError(EnvError, KeyError):
    """No environment is registered under the requested id."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class EnvCheckError(EnvError, AssertionError):
    """`check_env` found conformance failures; the message lists each one."""

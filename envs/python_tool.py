"""`stare/PythonTool-v0`: multi-turn math with a persistent Python interpreter (`code_interpreter`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Protocol

from envs.core import Grader, TextEnv
from envs.errors import SandboxUnavailable, ToolError
from envs.parsers import ToolCallParser
from envs.sandbox import make_sandbox
from envs.sandbox.result import RunResult, RunStatus
from tasks.task import Task

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant. Solve the problem step by step. You may run Python code with the "
    "code_interpreter tool; only what the code prints is returned. Put the final answer in \\boxed{}."
)


_CARETS = re.compile(r"^\s*[~^]+\s*$")
"""Python 3.11+ traceback marker lines (`~~^~~`): noise to the model."""


class Session(Protocol):
    """A per-episode interpreter: state persists between `run` calls until `close`."""

    def run(self, code: str, *, timeout: float, memory_mb: int, stdin: str) -> RunResult:
        """Run code in the session."""
        ...

    def close(self) -> None:
        """Release the interpreter."""
        ...


class _StatelessSession:
    """Adapts a sandbox that only has `run(code, ...)`: every call starts a fresh interpreter."""

    def __init__(self, sandbox: Any) -> None:
        self._sandbox = sandbox

    def run(self, code: str, *, timeout: float, memory_mb: int, stdin: str) -> RunResult:
        return self._sandbox.run(code, timeout=timeout, memory_mb=memory_mb, stdin=stdin)

    def close(self) -> None:
        pass


def resolve_sandbox(spec: Any) -> Any:
    """The sandbox for a `sandbox=` argument.

    Args:
        spec: "local" (the shared process-wide `LocalSandbox`), an http(s) URL of a SandboxFusion server
            (both via `envs.sandbox.make_sandbox`), or an object with `session()` or `run(...)`.
    """
    if isinstance(spec, str) and (spec == "local" or spec.startswith(("http://", "https://"))):
        return make_sandbox(spec)
    if callable(getattr(spec, "session", None)) or callable(getattr(spec, "run", None)):
        return spec
    raise ValueError(f"sandbox must be 'local', an http(s) SandboxFusion URL, or an object with session() "
                     f"or run(code, ...); got {spec!r}")


def format_run(result: RunResult, *, timeout: float, memory_mb: int, stderr_lines: int = 2) -> str:
    """The observation for one run: compact and deterministic (it is what the model learns to read).

    - Finished, exit code 0: stdout with surrounding whitespace stripped, or "(no output)".
    - Finished, non-zero exit: stripped stdout (if any), then the last `stderr_lines` non-empty lines
      of stderr without `~~^~~` marker lines (with the default 2: the failing source line and the
      exception line); raised as `ToolError(kind="code_error")`.
    - TimeLimitExceeded / MemoryLimitExceeded: a one-line `ToolError` of kind "timeout" / "memory_limit",
      followed by any `[sandbox]` note lines of stderr (e.g. that the session restarts empty).

    Raises:
        ToolError: The code failed (the message is the observation).
        SandboxUnavailable: The sandbox itself failed (`RunStatus.SandboxError`): not the model's fault.
    """
    stdout = result.stdout.strip()
    # The sandbox's own notes (e.g. "the next call starts an empty session") matter to the model.
    notes = "".join(f"\n{line}" for line in result.stderr.splitlines() if line.startswith("[sandbox]"))
    if result.status == RunStatus.TimeLimitExceeded:
        raise ToolError(f"TimeoutError: the code ran longer than {timeout:g} s and was stopped.{notes}",
                        kind="timeout")
    if result.status == RunStatus.MemoryLimitExceeded:
        raise ToolError(f"MemoryError: the code used more than {memory_mb} MB and was stopped.{notes}",
                        kind="memory_limit")
    if result.status == RunStatus.SandboxError:
        raise SandboxUnavailable(f"sandbox error: {result.stderr.strip()[-500:]}")
    if result.return_code == 0:
        return stdout or "(no output)"
    lines = [line for line in result.stderr.splitlines() if line.strip() and not _CARETS.match(line)]
    tail = lines[-stderr_lines:]
    error = "\n".join(tail) or f"the code exited with status {result.return_code}"
    raise ToolError(f"{stdout}\n{error}" if stdout else error, kind="code_error")


class PythonToolEnv(TextEnv):
    r"""Multi-turn math with a persistent Python interpreter.

    ## Description
    The assistant solves a math problem and may call `code_interpreter(code: str)` (the name verl and
    ReTool-style data use) to run Python in a per-episode interpreter session (variables persist
    between calls; the session closes at episode end and on `close()`). This is the tool family of STARE.

    ## Observation
    Chat messages. `reset` gives the optional system prompt and the user prompt; each tool turn gives one
    `{"role": "tool", "name": "code_interpreter", "content", "tool_call_id"}` message per call. Content is
    stripped stdout ("(no output)" when empty); on an exception the last stderr lines; distinct one-line
    messages for a timeout and a memory error; cut in the middle to `max_output_chars`.

    ## Action
    The assistant's text. Calls use the Hermes format `<tool_call>{"name": "code_interpreter",
    "arguments": {"code": "..."}}</tool_call>` (or fenced python blocks with `parser="python"`).

    ## Reward
    Accuracy in {0, 1} of the final assistant turn only (`tasks.grade_task`: the last `\boxed{}` answer);
    tool output is never graded. Opt-in shaping: `tool_error_penalty` per tool error (default 0).

    ## Episode End
    Terminated when the assistant answers without a tool call. Truncated (graded as no answer) when it
    attempts a call after `max_tool_turns` (default 8) tool turns.

    ## Arguments
    `dataset` (default "arith-tool-train"; e.g. "countdown-train" for the CPU preset), `sandbox`
    ("local": the shared process-wide LocalSandbox; an
    http(s) SandboxFusion URL; or a sandbox object), `timeout` (10 s), `memory_mb` (1024),
    `stderr_lines` (2), `system_prompt` (None for none), `prompt_template` (None: the task's style from
    `tasks.format_prompt`; "{prompt}" for the bare problem, or a style name), `parser`,
    `max_tool_turns`, `max_calls_per_turn`, `max_output_chars`, `tool_error_penalty`, `grader`,
    `persistent` (True: one interpreter session per episode; False: every call runs in a fresh
    interpreter from the sandbox's warm pool, no state between calls, no session slot held; the
    CPU preset uses False since its tool calls are independent one-liners).

    ## Version History
    - v0: initial version.
    """

    def __init__(self, *, dataset: str | Sequence[Task] = "arith-tool-train", sandbox: Any = "local",
                 timeout: float = 10.0, memory_mb: int = 1024, stderr_lines: int = 2,
                 system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
                 prompt_template: str | None = None, parser: str | ToolCallParser = "hermes",
                 max_tool_turns: int = 8, max_calls_per_turn: int = 4, max_output_chars: int = 2048,
                 tool_error_penalty: float = 0.0, grader: Grader | str | None = None,
                 persistent: bool = True) -> None:
        if timeout <= 0 or memory_mb <= 0 or stderr_lines < 1:
            raise ValueError(f"need timeout > 0, memory_mb > 0, stderr_lines >= 1; "
                             f"got {timeout}, {memory_mb}, {stderr_lines}")
        if not (sandbox == "local" or isinstance(sandbox, str) and sandbox.startswith(("http://", "https://"))):
            resolve_sandbox(sandbox)  # validates an object now; names and URLs resolve on first use
        super().__init__(dataset=dataset, tools=[self.code_interpreter], grader=grader,
                         system_prompt=system_prompt, prompt_template=prompt_template, parser=parser,
                         max_tool_turns=max_tool_turns, max_calls_per_turn=max_calls_per_turn,
                         max_output_chars=max_output_chars, tool_error_penalty=tool_error_penalty)
        self._sandbox_spec, self._sandbox = sandbox, None
        self.timeout, self.memory_mb, self.stderr_lines = timeout, memory_mb, stderr_lines
        self._session: Session | None = None
        self.persistent = persistent

    def code_interpreter(self, code: str) -> str:
        """Run Python code in a persistent interpreter and return what it printed.

        Args:
            code: Python source to execute. Variables persist between calls; use print() to see values.
        """
        if self._session is None:
            if self._sandbox is None:
                self._sandbox = resolve_sandbox(self._sandbox_spec)
            has_session = self.persistent and callable(getattr(self._sandbox, "session", None))
            self._session = self._sandbox.session() if has_session else _StatelessSession(self._sandbox)
        result = self._session.run(code, timeout=self.timeout, memory_mb=self.memory_mb, stdin="")
        return format_run(result, timeout=self.timeout, memory_mb=self.memory_mb,
                          stderr_lines=self.stderr_lines)

    def on_episode_end(self) -> None:
        """Close the episode's interpreter session, if one was opened."""
        session, self._session = self._session, None
        if session is not None:
            session.close()

"""The text-environment contract: `TextEnv` (a `gymnasium.Env`), `StepResult` and the chat spaces.

An observation is a list of chat messages (`{"role", "content", ...}`); an action is the text of one
assistant turn. `step()` reads as parse -> act -> score -> decide -> return (STYLE rule 3).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypedDict

import gymnasium

from envs.errors import ResetNeeded
from envs.parsers import ToolCallError, ToolCallParser, get_parser
from envs.tools import ToolCall, ToolOutcome, ToolSet
from tasks.grading import grade_task, task_grader
from tasks.prompts import check_prompt_template, user_prompt
from tasks.registry import load_cached
from tasks.task import Grade, GradeStatus, Task

Message = dict[str, Any]
"""One chat message: `role` in ROLES, `content` a string; tool messages add `name` and `tool_call_id`."""

ROLES = ("system", "user", "assistant", "tool")

Grader = Callable[[str, Task], Grade]
"""Grades the final assistant turn's text against a task."""


class GradeInfo(TypedDict):
    """`StepInfo["grade"]`: the `tasks.Grade` of the final answer, as plain data."""

    status: GradeStatus
    """correct, wrong, no_answer, verifier_timeout or verifier_error."""
    prediction: str | None
    """The extracted final answer, or None when none was found."""
    correct: bool
    """True only when the status is `correct`."""


class _StepCounts(TypedDict):
    """The keys of every step's info (`StepInfo`)."""

    tool_calls: int
    """Tool calls run this step (0 on the final step)."""
    tool_errors: int
    """Of them, calls that ended in an error (parse, unknown tool, timeout, ...)."""
    error_kinds: list[str]
    """The `kind` of each error this step (`envs.errors`)."""
    tool_turns: int
    """Tool turns so far in the episode."""


class StepInfo(_StepCounts, total=False):
    """The `info` of `step()`, the env -> agents hand-off (read by `agents.episode`).

    Every step: `tool_calls`, `tool_errors`, `error_kinds`, `tool_turns`; the final step adds the rest.
    """

    grade: GradeInfo
    """Final step only: the grade of the answer."""
    task_id: str
    """Final step only: the task's id."""
    truncated_reason: str
    """Final step of a truncated episode: why (`max_tool_turns`)."""


class StepResult(NamedTuple):
    """What `step()` returns; unpacks as Gymnasium's `(obs, reward, terminated, truncated, info)`."""

    messages: list[Message]
    """The new chat messages to append (tool output); empty when the episode ends on an answer."""
    reward: float
    """Accuracy in {0, 1} on the final step (minus opt-in shaping), 0.0 before."""
    terminated: bool
    """The episode ended naturally: the assistant answered without a tool call."""
    truncated: bool
    """The episode was cut by the tool-turn budget; it is graded as no answer."""
    info: StepInfo
    """`tool_calls`, `tool_errors`, `error_kinds`, `tool_turns`; on the final step also `grade`."""


class ChatSpace(gymnasium.Space[list]):
    """Observation space: a list of chat messages with a known role and string content."""

    def __init__(self) -> None:
        super().__init__(shape=None, dtype=None)

    def contains(self, x: Any) -> bool:
        """True for a list of dicts with `role` in ROLES and a string `content`."""
        return isinstance(x, list) and all(
            isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str) for m in x)

    def sample(self, mask: Any = None, probability: Any = None) -> list[Message]:
        """A one-message conversation (only useful for smoke tests)."""
        return [{"role": "user", "content": str(self.np_random.integers(1000))}]


class TextSpace(gymnasium.Space[str]):
    """Action space: any string (one assistant turn)."""

    def __init__(self) -> None:
        super().__init__(shape=None, dtype=None)

    def contains(self, x: Any) -> bool:
        """True for any `str`."""
        return isinstance(x, str)

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """A short random lowercase string (only useful for smoke tests)."""
        return "".join(chr(97 + int(c)) for c in self.np_random.integers(0, 26, size=8))


class TextEnv(gymnasium.Env[list, str]):
    """Base class of multi-turn text environments with tools (zero tools gives a single-turn env).

    Subclasses pass their tools and defaults to `__init__` and write an env card docstring; most need
    no other code. Override `on_episode_end` to release per-episode resources.

    Args:
        dataset: Task source for `reset()` without a task: a `tasks.load` name or a list of `Task`.
        tools: Typed, documented tool functions (see `envs.tools.function_schema`).
        grader: `(final_text, task) -> Grade`; default `tasks.grade_task`. A string names a math grading
            mode of `tasks.grade_task` ("default", or "authors" for the STARE authors' reward), so a
            config can set it: `data.env_kwargs: {grader: authors}`.
        system_prompt: System message text, or None for no system message.
        prompt_template: User message: a template where every "{prompt}" is replaced by `task.prompt` (other
            braces stay), a `tasks.prompt_styles()` name ("cot", "tool", "countdown", "plain"), or None
            for the task's default style (`tasks.format_prompt(task)`).
        parser: Tool-call parser name ("hermes", "python") or an object with `parse(text, tools)`.
        max_tool_turns: Turns with tool calls allowed; a call attempted after them truncates the episode.
        max_calls_per_turn: Calls run per turn; extra calls get an error observation.
        max_output_chars: Budget of each tool message (cut in the middle with a visible marker).
        tool_error_penalty: Opt-in shaping: subtracted from the final reward per tool error (default 0).
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, *, dataset: str | Sequence[Task], tools: Sequence[Callable[..., Any]] = (),
                 grader: Grader | str | None = None, system_prompt: str | None = None,
                 prompt_template: str | None = "{prompt}", parser: str | ToolCallParser = "hermes",
                 max_tool_turns: int = 8, max_calls_per_turn: int = 4, max_output_chars: int = 2048,
                 tool_error_penalty: float = 0.0) -> None:
        if isinstance(dataset, str):
            self._dataset_name, self._tasks = dataset, None
        else:
            self._dataset_name, self._tasks = None, list(dataset)
            if not self._tasks or not all(isinstance(t, Task) for t in self._tasks):
                raise ValueError("dataset must be a tasks.load name or a non-empty list of tasks.Task")
        check_prompt_template(prompt_template)
        if max_tool_turns < 0 or max_calls_per_turn < 1:
            raise ValueError(f"need max_tool_turns >= 0 and max_calls_per_turn >= 1, got {max_tool_turns}, "
                             f"{max_calls_per_turn}")
        self.tools = ToolSet(tools, max_output_chars=max_output_chars)
        self.parser = get_parser(parser)
        self.grader = task_grader(grader) if isinstance(grader, str) else grader or grade_task  # type: ignore[arg-type]
        self.system_prompt, self.prompt_template = system_prompt, prompt_template
        self.max_tool_turns, self.max_calls_per_turn = max_tool_turns, max_calls_per_turn
        self.tool_error_penalty = tool_error_penalty
        self.observation_space, self.action_space = ChatSpace(), TextSpace()
        self._task: Task | None = None
        self._running = False
        self._tool_turns = self._episode_errors = 0

    # ---- episode start -------------------------------------------------------------------------
    @property
    def task(self) -> Task | None:
        """The task of the current (or last) episode."""
        return self._task

    def tasks(self) -> list[Task]:
        """The default dataset (loaded on first use)."""
        if self._tasks is None:
            self._tasks = load_cached(self._dataset_name)
        return self._tasks

    def initial_messages(self, task: Task) -> list[Message]:
        """System message (when set) and the user message built from `prompt_template`."""
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return messages + [{"role": "user", "content": user_prompt(task, self.prompt_template)}]

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[list[Message], dict[str, Any]]:
        """Start an episode on `options["task"]`, or on a task drawn from the dataset with `np_random`.

        Returns:
            `(messages, info)`: the initial messages and `info["tools"]` (the tool schemas), `task_id`.
        """
        super().reset(seed=seed)
        self._end_episode()
        task = (options or {}).get("task")
        if task is None:
            pool = self.tasks()
            task = pool[int(self.np_random.integers(len(pool)))]
        elif not isinstance(task, Task):
            raise TypeError(f"options['task'] must be a tasks.Task, got {type(task).__name__}")
        self._task, self._running = task, True
        self._tool_turns = self._episode_errors = 0
        info = {"tools": copy.deepcopy(self.tools.schemas), "task_id": task.id, "family": task.family}
        return self.initial_messages(task), info

    # ---- one turn ------------------------------------------------------------------------------
    def step(self, action: str) -> StepResult:
        """Play one assistant turn: run its tool calls, or grade it when it makes none."""
        if not isinstance(action, str):
            raise TypeError(f"action must be the assistant's text (str), got {type(action).__name__}")
        if not self._running:
            raise ResetNeeded("call reset() before step(); the previous episode has ended")
        attempts = self.parser.parse(action, self.tools) if len(self.tools) else []   # parse
        if not attempts:
            return self._finish(self.grader(action, self._task), terminated=True)      # score, decide
        return self.step_calls(attempts)

    def step_calls(self, attempts: Sequence[ToolCall | ToolCallError]) -> StepResult:
        """Play one tool turn whose calls are already parsed (e.g. an MCP `tools/call` of a served env).

        Same budget, observations and info as `step()` on a turn that makes these calls.
        """
        if not attempts:
            raise ValueError("step_calls needs at least one call; an answer without calls goes to step()")
        if not self._running:
            raise ResetNeeded("call reset() before step(); the previous episode has ended")
        if self._tool_turns >= self.max_tool_turns:
            return self._finish(Grade(False, None, "no_answer"), truncated=True)
        self._tool_turns += 1
        outcomes = [self._act(a, i) for i, a in enumerate(attempts)]                    # act
        errors = [o.error for o in outcomes if o.error]
        self._episode_errors += len(errors)
        messages = [self._tool_message(o, i) for i, o in enumerate(outcomes)]
        info: StepInfo = {"tool_calls": len(outcomes), "tool_errors": len(errors), "error_kinds": errors,
                          "tool_turns": self._tool_turns}
        return StepResult(messages, 0.0, False, False, info)

    def _act(self, attempt: ToolCall | ToolCallError, index: int) -> ToolOutcome:
        """Run one call attempt; parse failures and over-budget calls become error outcomes."""
        if isinstance(attempt, ToolCallError):
            return ToolOutcome("", attempt.message, attempt.kind)
        if index >= self.max_calls_per_turn:
            return ToolOutcome(attempt.name, f"Error: at most {self.max_calls_per_turn} tool calls per turn; "
                               "this call was not run.", "too_many_calls")
        return self.tools.run(attempt)

    def _tool_message(self, outcome: ToolOutcome, index: int) -> Message:
        return {"role": "tool", "name": outcome.name, "content": outcome.content,
                "tool_call_id": f"call_{self._tool_turns}_{index}"}

    def _finish(self, grade: Grade, *, terminated: bool = False, truncated: bool = False) -> StepResult:
        reward = grade.reward - self.tool_error_penalty * self._episode_errors
        graded: GradeInfo = {"status": grade.status, "prediction": grade.prediction, "correct": grade.correct}
        turns = self._tool_turns
        info: StepInfo = {"tool_calls": 0, "tool_errors": 0, "error_kinds": [], "tool_turns": turns,
                          "grade": graded, "task_id": self._task.id}
        if truncated:
            info["truncated_reason"] = "max_tool_turns"
        self._end_episode()
        return StepResult([], float(reward), terminated, truncated, info)

    # ---- episode end ---------------------------------------------------------------------------
    def on_episode_end(self) -> None:
        """Release per-episode resources (e.g. an interpreter session). Called once per episode."""

    def _end_episode(self) -> None:
        if self._running:
            self._running = False
            self.on_episode_end()

    def close(self) -> None:
        """End any running episode and release resources; safe to call more than once."""
        self._end_episode()
        super().close()


__all__ = ["ROLES", "ChatSpace", "Grader", "Message", "StepResult", "TextEnv", "TextSpace"]

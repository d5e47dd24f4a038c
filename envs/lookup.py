"""`stare/Lookup-v0`: a non-math tool env: multi-hop questions about a fictional staff directory."""

from __future__ import annotations

from collections.abc import Sequence

from envs.core import Grader, TextEnv
from envs.errors import ToolError
from tasks.extract import last_boxed
from tasks.task import Grade, Task

DIRECTORY: dict[str, dict[str, str]] = {
    "Ada Park": {"team": "Compilers", "office": "B214", "manager": "Lena Ortiz"},
    "Ben Cho": {"team": "Storage", "office": "A101", "manager": "Omar Haddad"},
    "Lena Ortiz": {"team": "Compilers", "office": "C300", "manager": "Rui Tanaka"},
    "Omar Haddad": {"team": "Storage", "office": "A120", "manager": "Rui Tanaka"},
    "Rui Tanaka": {"team": "Leadership", "office": "D001", "manager": "Rui Tanaka"},
    "Sofia Berg": {"team": "Networking", "office": "B230", "manager": "Omar Haddad"},
    "Tariq Aziz": {"team": "Networking", "office": "B231", "manager": "Lena Ortiz"},
    "Mei Lin": {"team": "Compilers", "office": "B215", "manager": "Lena Ortiz"},
}
"""Invented people, so the answers cannot be known without the tool."""


SYSTEM_PROMPT = "Answer with the lookup tool. Put the final answer in \\boxed{}."


def lookup(name: str) -> str:
    """Look up a person in the staff directory.

    Args:
        name: Full name, e.g. "Ada Park".
    """
    record = DIRECTORY.get(" ".join(name.split()).title())
    if record is None:
        raise ToolError(f"Error: no person named {name!r} in the directory.", kind="not_found")
    return "; ".join(f"{key}: {value}" for key, value in record.items())


def directory_tasks() -> list[Task]:
    """The shipped dataset: one- and two-hop questions over `DIRECTORY` (16 tasks)."""
    tasks = []
    for i, (name, record) in enumerate(sorted(DIRECTORY.items())):
        tasks.append(Task(f"lookup-team-{i}", f"Which team is {name} on?", record["team"], "tool",
                          {"grader": "exact"}))
        boss = DIRECTORY[record["manager"]]
        tasks.append(Task(f"lookup-office-{i}", f"In which office does the manager of {name} sit?",
                          boss["office"], "tool", {"grader": "exact"}))
    return tasks


def grade_exact(text: str, task: Task) -> Grade:
    """Case- and whitespace-insensitive exact match of the last boxed answer against `task.answer`."""
    prediction = last_boxed(text)
    if prediction is None or not prediction.strip():
        return Grade(False, None, "no_answer")
    norm = lambda s: " ".join(s.split()).casefold()  # noqa: E731
    correct = norm(prediction) == norm(task.answer)
    return Grade(correct, prediction.strip(), "correct" if correct else "wrong")


class LookupEnv(TextEnv):
    r"""Multi-hop questions about a fictional staff directory, answered with a lookup tool.

    ## Description
    A small non-math env that proves the tool API is general: the tool takes a name and returns a record
    (`team`, `office`, `manager`); two-hop questions need two lookups.

    ## Observation
    Optional system prompt and the user question; then one `{"role": "tool", "name": "lookup", ...}`
    message per call ("Error: no person named ..." for unknown names).

    ## Action
    The assistant's text; Hermes tool calls `<tool_call>{"name": "lookup", "arguments": {"name": "Ada
    Park"}}</tool_call>`.

    ## Reward
    1 when the last `\boxed{}` of the final assistant turn equals the answer (case and spacing ignored),
    else 0. Tool output is never graded.

    ## Episode End
    Terminated on an answer without a tool call; truncated when a call is attempted after
    `max_tool_turns` (default 4) tool turns.

    ## Arguments
    `dataset` (default: the 16 shipped directory questions), `system_prompt`, `prompt_template`,
    `max_tool_turns`, `max_output_chars`, `tool_error_penalty`, `grader`.

    ## Version History
    - v0: initial version.
    """

    def __init__(self, *, dataset: str | Sequence[Task] | None = None,
                 system_prompt: str | None = SYSTEM_PROMPT,
                 prompt_template: str = "{prompt}", max_tool_turns: int = 4, max_output_chars: int = 512,
                 tool_error_penalty: float = 0.0, grader: Grader | None = None) -> None:
        super().__init__(dataset=directory_tasks() if dataset is None else dataset, tools=[lookup],
                         grader=grader or grade_exact, system_prompt=system_prompt,
                         prompt_template=prompt_template, max_tool_turns=max_tool_turns,
                         max_output_chars=max_output_chars, tool_error_penalty=tool_error_penalty)

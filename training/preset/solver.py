"""The Countdown solver of `stare demos stare/PythonTool-v0`: the CPU preset's imperfect searcher.

A thin wrapper over `training.preset.demos.scripted_turns`, so its tuning there flows through.
"""

from __future__ import annotations

import random

from tasks.task import Task
from training.preset.demos import scripted_turns


def countdown_solver(task: Task, rng: random.Random, *, max_tries: int = 4) -> list[str] | None:
    """The searcher's assistant turns for a Countdown task; None for tasks without Countdown numbers.

    It tries k ~ U{1..max_tries} candidate expressions with `code_interpreter` and boxes the first
    hit or the last try, so some of its demonstrations are wrong on purpose (room left for RL).
    """
    if "numbers" not in task.meta or "target" not in task.meta:
        return None
    return scripted_turns(task, rng, max_tries=max_tries)[0]

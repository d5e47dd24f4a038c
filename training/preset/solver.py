"""The Countdown solver of `stare demos stare/PythonTool-v0`: the CPU preset's imperfect searcher.

A thin wrapper over `training.preset.demos.scripted_turns`, so its tuning there flows through.
"""

from __future__ import annotations

import random

from tasks.task import Task
from training.preset.demos import scripted_turns


def countdown_solver(task: Task, rng: random.Random, *, max_tries: int = 3, aware: float = 0.0,
                     persist: float | None = None, check: bool = False) -> list[str] | None:
    """The searcher's assistant turns for a Countdown task; None for tasks without Countdown numbers.

    It tries candidate expressions with `code_interpreter` (k ~ U{1..max_tries} up front, or, with
    `persist`, another try after each miss with that probability; with probability `aware` a try
    picks among the solving candidates) and boxes the first hit or the last try, so some of its
    demonstrations are wrong on purpose (room left for RL). See `scripted_turns`.
    """
    if "numbers" not in task.meta or "target" not in task.meta:
        return None
    return scripted_turns(task, rng, max_tries=max_tries, aware=aware, persist=persist, check=check)[0]

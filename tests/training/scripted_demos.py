"""A reference player for the preset's scripted searcher, used only by the tests.

`make_demos` replays `scripted_turns` through `agents.rollout_batch` with one scripted policy per
episode (`ScriptBook`) and checks that the env grades every script as the searcher expects. The
tests compare it with the production path (`training.sft.demos.play_solver` + `encode_demos`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from agents.policy import Completion, SamplingParams
from agents.rollout import RolloutLimits, rollout_batch
from agents.scripted import ScriptedPolicy
from agents.trajectory import Trajectory
from tasks.task import Task
from training.preset.demos import demo_stats, scripted_turns


class ScriptBook:
    """A `Policy` that replays a different script per episode, keyed by the episode's initial prompt.

    Each script is an `agents.ScriptedPolicy`; a context is routed to the script whose initial
    prompt ids are a prefix of it. Initial prompts must therefore be distinct.
    """

    def __init__(self, scripts: dict[tuple[int, ...], ScriptedPolicy]) -> None:
        self.scripts = scripts
        self._lengths = sorted({len(k) for k in scripts}, reverse=True)

    def generate(self, prompts: list[list[int]], sampling: SamplingParams) -> list[Completion]:
        """One scripted turn per prompt, from that episode's script."""
        out = []
        for prompt in prompts:
            key = next((tuple(prompt[:n]) for n in self._lengths if tuple(prompt[:n]) in self.scripts), None)
            if key is None:
                raise KeyError(
                    "ScriptBook: no script starts with this context; were the initial prompts distinct?"
                )
            out += self.scripts[key].generate([prompt], sampling)
        return out


def make_demos(
    tasks: Sequence[Task],
    *,
    copies: int,
    make_env: Callable[[], Any],
    tokenizer: Any,
    initial_prompt: Callable[[Task], list[int]],
    limits: RolloutLimits,
    seed: int,
    max_tries: int = 3,
    aware: float = 0.0,
    persist: float | None = None,
    max_workers: int = 4,
    chunk: int = 64,
) -> tuple[list[Trajectory], dict[str, float]]:
    """Play `copies` scripted searches of every task through the env; returns demos and searcher stats.

    Args:
        tasks: Countdown tasks with distinct prompts.
        copies: Independent scripts per task.
        make_env: Builds the env RL will use (same kwargs).
        tokenizer: The preset tokenizer (renders prompts and tool output).
        initial_prompt: The env's initial prompt ids of a task (to key the scripts).
        limits: Rollout budgets, as in RL.
        seed: Seed of the searcher's choices.
        max_tries: Largest k.
        aware: Probability that a try is target-aware (see `scripted_turns`).
        persist: Probability of trying again after a miss (see `scripted_turns`).
        max_workers: Threads running tool calls concurrently.
        chunk: Episodes per `rollout_batch` call (at most one per task; the env opens one interpreter
            session per live episode, and the local sandbox caps live sessions at 64).

    Returns:
        (demos, stats): stats holds the scripted and graded success rates, overall and per difficulty,
        and the mean number of tool calls. A scripted hit that the env grades wrong raises.
    """
    rng = random.Random(seed)
    demos: list[Trajectory] = []
    jobs = [task for _ in range(copies) for task in tasks]
    for lo in range(0, len(jobs), chunk):  # distinct prompts per chunk; bounded live interpreter sessions
        part = jobs[lo : lo + chunk]
        scripts, hits = {}, {}
        for task in part:
            turns, hits[task.id] = scripted_turns(
                task, rng, max_tries=max_tries, aware=aware, persist=persist
            )
            scripts[tuple(initial_prompt(task))] = ScriptedPolicy(turns, tokenizer)
        played = rollout_batch(
            make_env,
            ScriptBook(scripts),
            tokenizer,
            part,
            group_size=1,
            sampling=SamplingParams(max_tokens=limits.max_response_tokens),
            limits=limits,
            max_workers=max_workers,
        )
        for task, traj in zip(part, played, strict=False):
            if (traj.reward > 0) != hits[task.id]:
                raise RuntimeError(
                    f"demo of {task.id}: the script {'hit' if hits[task.id] else 'missed'} but the "
                    f"env graded {traj.grade_status!r} ({traj.finish_reason}); env and searcher disagree"
                )
        demos += played
    return demos, demo_stats(demos, tasks, copies)

"""Warm-start demonstrations: an imperfect scripted Countdown searcher, played through the real env.

The searcher tries distinct candidate expressions, each with one `code_interpreter` call
`print(EXPR)`, until one hits the target or it gives up: after a miss it tries again with
probability `persist`, up to `max_tries` (or, with `persist=None`, it draws k ~ U{1..max_tries}
tries up front). Each try is target-aware with
probability `aware`: it picks uniformly among the untried candidates that reach the target (so the
demonstrated solutions stay diverse); otherwise it picks a random candidate regardless of the target
(a three-number form with probability `three_number_share`, else a two-number form). It boxes the
first candidate that hits the target, or the last one tried. Its success rate is therefore partial
and uneven (hard puzzles have 2-4 solving strings among up to 180): the warm start solves some
puzzles some of the time, which leaves RL a signal, and several solutions per easy puzzle keep the
optimum stochastic, which makes premature collapse costly.

The Countdown solver of `stare demos` (`training.preset.solver`) wraps `scripted_turns`; the warm
start plays its turns through the real env (`training.sft.demos.play_solver`), so each demonstration
has exactly the tokens, tool output, template glue and loss masks that RL rollouts have.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Any

from agents.trajectory import Trajectory
from tasks.countdown import countdown_candidates, countdown_solutions, evaluate_expression
from tasks.task import Task
from training.preset.tokenizer import tool_call_text


def scripted_turns(
    task: Task,
    rng: random.Random,
    *,
    max_tries: int = 3,
    aware: float = 0.0,
    persist: float | None = None,
    three_number_share: float = 0.75,
    check: bool = False,
) -> tuple[list[str], bool]:
    r"""The searcher's assistant turns for one Countdown task, and whether its boxed answer hits.

    Args:
        task: A Countdown task (`meta["numbers"]`, `meta["target"]`).
        rng: Source of every choice.
        max_tries: Most tries.
        aware: Probability that a try picks among the untried solving candidates (uniformly).
        persist: After a miss, the probability of trying again (up to `max_tries`); None = draw the
            number of tries k ~ U{1..max_tries} up front (the blind searcher of the first preset).
        three_number_share: Probability that a blind try uses all three numbers.
        check: Each call prints `EXPR-TARGET` instead of `EXPR`, so the tool answers 0 exactly on a
            hit: the searcher uses the interpreter to check a candidate, not only to evaluate it.

    Returns:
        (turns, hit): k tool-call turns then one `\\boxed{EXPR}` turn; `hit` is True when EXPR
        evaluates to the target.
    """
    if not 0.0 <= aware <= 1.0 or not (persist is None or 0.0 <= persist <= 1.0):
        raise ValueError(f"scripted_turns: aware and persist must be probabilities in [0, 1], got "
                         f"aware={aware}, persist={persist}")
    numbers, target = task.meta["numbers"], int(task.meta["target"])
    by_size: dict[int, list[str]] = {2: [], 3: []}
    for expr in countdown_candidates(numbers):
        by_size[len(re.findall(r"\d+", expr))].append(expr)
    solving = countdown_solutions(numbers, target)
    tried: list[str] = []
    hit = False
    tries = max_tries if persist is not None else rng.randint(1, max_tries)
    for attempt in range(tries):
        if persist is not None and attempt and rng.random() >= persist:
            break
        size = 3 if rng.random() < three_number_share else 2
        fresh = [e for e in by_size[size] if e not in tried] or [
            e for e in by_size[5 - size] if e not in tried
        ]
        if aware and rng.random() < aware and solving:  # aware=0 keeps the blind searcher's draws
            fresh = solving
        if not fresh:
            break
        tried.append(rng.choice(fresh))
        if evaluate_expression(tried[-1])[0] == target:
            hit = True
            break
    # `-TARGET` appended at the top level is exact: + and - are left-associative and bind loosest
    turns = [tool_call_text(f"print({expr}-{target})" if check else f"print({expr})") for expr in tried]
    return turns + [f"\\boxed{{{tried[-1]}}}"], hit


def demo_stats(demos: Sequence[Trajectory], tasks: Sequence[Task], copies: int) -> dict[str, float]:
    """Success rate (overall, hard, easy) and mean tool calls of the demonstrations."""
    difficulty = [t.meta.get("difficulty", "all") for t in tasks] * copies
    out = {
        "demo_success": sum(d.reward > 0 for d in demos) / len(demos),
        "demo_tool_calls": sum(float(d.metrics.get("tool_calls", 0)) for d in demos) / len(demos),
        "demo_sampled_tokens": sum(sum(d.loss_mask) for d in demos) / len(demos),
    }
    for level in ("hard", "easy"):
        picked = [d for d, lv in zip(demos, difficulty, strict=False) if lv == level]
        if picked:
            out[f"demo_success_{level}"] = sum(d.reward > 0 for d in picked) / len(picked)
    return out


_PRINT = re.compile(r'"code": "print\((.*)\)"')
_BOXED = re.compile(r"\\boxed\{(.*)\}\s*$")


def check_agreement(demos: Sequence[Any], tasks: Sequence[Task]) -> None:
    """Check that the env and the searcher agree on every played demonstration.

    Each tool output must be the value of the expression the call printed, and the env must reward
    the episode exactly when its boxed expression reaches the target; both computed here with
    `evaluate_expression` (never the sandbox), and the call and the box are read with this module's
    own patterns rather than the env's tool parser or the grader's extractor, so that a bug in those
    cannot agree with itself. A disagreement means the sandbox, the tool parser or the grader is
    broken, and SFT on such demonstrations would teach the wrong thing.

    Args:
        demos: Played demonstrations (`training.sft.data.Demo`: `messages`, `reward`, `task_id`).
        tasks: The Countdown tasks they were played on (looked up by id).

    Raises:
        RuntimeError: The first disagreement, naming the task, the turn and both values.
    """
    by_id = {t.id: t for t in tasks}
    for demo in demos:
        task = by_id[demo.task_id]
        target = int(task.meta["target"])
        printed = None
        for message in demo.messages:
            if message["role"] == "assistant" and (call := _PRINT.search(message["content"])):
                printed = evaluate_expression(call.group(1))[0]
            elif message["role"] == "tool" and (said := message["content"].strip()) != str(printed):
                raise RuntimeError(f"demonstration of {task.id}: the tool printed {said!r} where the "
                                   f"expression's value is {printed}")
        boxed = _BOXED.search(demo.messages[-1]["content"])
        hit = boxed is not None and evaluate_expression(boxed.group(1))[0] == target
        if hit != (float(demo.reward or 0.0) > 0):
            raise RuntimeError(f"demonstration of {task.id}: the env's reward is {demo.reward} but the "
                               f"boxed answer {'reaches' if hit else 'misses'} the target {target}")

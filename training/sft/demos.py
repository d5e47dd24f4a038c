"""Demonstrations from an environment: a scripted solver played through the env, or rejection sampling.

Solver protocol: a solver is `solve(task, rng) -> list[str] | None`, the assistant turns (tool calls
as Hermes `<tool_call>` text, then the answer) that a policy would write for `task`, or None when it
has no script for that task. An env provides one as a `solve(self, task, rng)` method; an env that
cannot import training code can have one registered here with `register_solver(env_id, fn)`
(`stare/PythonTool-v0` gets the CPU preset's Countdown searcher, `training.preset.solver`).

`play_solver` plays the turns through the real env (`reset`, then `step` per turn, as a rollout
does) and records the transcript the env produced, so tool results are the env's own. No tokenizer
is involved: budgets are applied when the demonstrations are encoded for a model
(`training.sft.encode`), exactly as a rollout applies them.

`sample_demos` plays a policy (any model directory) with the RL rollout loop and keeps the episodes
the env rewarded.
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agents.episode import RolloutLimits
from agents.hf_policy import HFPolicy
from agents.policy import SamplingParams
from agents.rollout import rollout_batch
from tasks.task import Task
from training.sft.data import Demo, check_record

Solver = Callable[[Task, random.Random], "list[str] | None"]
"""`solve(task, rng)`: the assistant turns for `task`, or None (see the module docstring)."""

SOLVERS: dict[str, Solver | str] = {"stare/PythonTool-v0": "training.preset.solver:countdown_solver"}
"""Solvers for env ids whose env class has no `solve` method: a function or a lazy "module:function"."""


def register_solver(env_id: str, solver: Solver | str) -> None:
    """Register `solver` (or "module:function") for `env_id`; an env's own `solve` method wins."""
    SOLVERS[env_id] = solver


def find_solver(env: Any, env_id: str) -> Solver:
    """The env's `solve` method, else the solver registered for `env_id`.

    Raises:
        LookupError: Neither exists; the message says how to add one or to sample from a policy.
    """
    method = getattr(getattr(env, "unwrapped", env), "solve", None)
    if callable(method):
        return method
    if env_id in SOLVERS:
        solver = SOLVERS[env_id]
        if isinstance(solver, str):
            module, name = solver.split(":")
            solver = getattr(importlib.import_module(module), name)
        return solver
    raise LookupError(
        f"{env_id} has no scripted solver: give its env class a `solve(self, task, rng)` "
        "method returning the assistant turns (docs/sft.md), or sample demonstrations "
        "from a model with `stare demos ENV_ID --policy MODEL_DIR`"
    )


def play_script(
    make_env: Callable[[], Any], task: Task, turns: Sequence[str], *, max_turns: int, source: str = "solver"
) -> Demo:
    """Play `turns` through a fresh env for `task`; the transcript and reward as a `Demo`."""
    env = make_env()
    try:
        messages, info = env.reset(options={"task": task})
        transcript, reward = [dict(m) for m in messages], 0.0
        for turn in list(turns)[:max_turns]:
            transcript.append({"role": "assistant", "content": turn})
            observation, step_reward, terminated, truncated, _ = env.step(turn)
            reward += float(step_reward)
            if terminated or truncated:
                break
            transcript += [dict(m) for m in observation]
    finally:
        env.close()
    record = {
        "messages": transcript,
        "tools": info.get("tools") or [],
        "task_id": task.id,
        "reward": reward,
        "source": source,
    }
    return check_record(record, f"task {task.id}")


def play_solver(
    make_env: Callable[[], Any],
    tasks: Sequence[Task],
    solver: Solver,
    *,
    copies: int = 1,
    seed: int = 0,
    max_turns: int = 8,
    max_workers: int = 4,
) -> list[Demo]:
    """`copies` scripted episodes of every task (copy-major order), solver draws from `Random(seed)`.

    The scripts are drawn first, in order, so the demonstrations depend only on the seed; the
    episodes then play in `max_workers` threads. Tasks the solver returns None for are skipped.
    """
    rng = random.Random(seed)
    jobs = [(task, solver(task, rng)) for _ in range(copies) for task in tasks]
    jobs = [(task, turns) for task, turns in jobs if turns]
    with ThreadPoolExecutor(max_workers=max(1, max_workers)) as pool:
        return list(pool.map(lambda job: play_script(make_env, job[0], job[1], max_turns=max_turns), jobs))


def sample_demos(
    make_env: Callable[[], Any],
    model: Any,
    tokenizer: Any,
    tasks: Sequence[Task],
    *,
    k: int,
    sampling: SamplingParams,
    limits: RolloutLimits,
    seed: int = 0,
    max_workers: int = 4,
    chunk: int = 16,
) -> tuple[list[Demo], int]:
    """Rejection sampling: play `k` episodes per task with `model`, keep the rewarded ones.

    Returns:
        (the demonstrations with reward > 0 and no world failure, the number of episodes played).
    """
    policy = HFPolicy(
        model,
        eos_token_ids=[tokenizer.eos_token_id],
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
    )
    probe = make_env()
    tools = probe.reset(options={"task": tasks[0]})[1].get("tools") or []
    probe.close()
    kept, played = [], 0
    for lo in range(0, len(tasks), chunk):
        part = list(tasks[lo : lo + chunk])
        trajs = rollout_batch(
            make_env,
            policy,
            tokenizer,
            part,
            group_size=k,
            sampling=sampling,
            limits=limits,
            seed=seed + lo * k,
            max_workers=max_workers,
        )
        played += len(trajs)
        for traj in trajs:
            if traj.reward > 0 and not traj.failed:
                record = {
                    "messages": traj.messages,
                    "tools": tools,
                    "task_id": traj.task_id,
                    "reward": traj.reward,
                    "source": "policy",
                }
                kept.append(check_record(record, f"task {traj.task_id}"))
    return kept, played

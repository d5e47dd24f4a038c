"""Prompt order and the rollout stage of a step: sample groups, score them, DAPO dynamic sampling.

Every random draw here comes from state that a checkpoint holds: the data order from
(seed, epoch), and rollout sampling from the torch RNG reseeded with (seed, step, round) before
each round, so a resumed run samples exactly what a straight run would have.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

import stare
from agents.trajectory import Trajectory
from tasks.task import Task
from training import distributed
from training.config import TrainConfig


class TaskStream:
    """An endless, seeded, epoch-shuffled stream of tasks with a resumable cursor.

    Epoch e is the permutation `np.random.default_rng([seed, e]).permutation(N)` (identity when
    not shuffling); `take(n)` returns the next n tasks, crossing epoch boundaries.
    """

    def __init__(self, tasks: Sequence[Any], *, seed: int, shuffle: bool = True, rank: int = 0,
                 world_size: int = 1) -> None:
        if not tasks:
            raise ValueError("the training task set is empty; check data.train_tasks and data.train_limit")
        self.tasks = list(tasks)
        self.seed = int(seed)
        self.shuffle = shuffle
        self.rank, self.world_size = rank, world_size
        self.epoch = 0
        self.position = 0
        self._order = self._permutation(0)

    def _permutation(self, epoch: int) -> np.ndarray:
        if not self.shuffle:
            return np.arange(len(self.tasks))
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.tasks))

    def take(self, count: int) -> list[Any]:
        """The next `count` tasks of this process.

        With W processes every process advances the shared cursor by count × W and keeps the tasks
        at positions rank, rank + W, ... of them, so W processes taking `count` each play exactly
        the count × W prompts one process taking count × W would.
        """
        out = []
        for _ in range(count * self.world_size):
            if self.position >= len(self.tasks):
                self.epoch, self.position = self.epoch + 1, 0
                self._order = self._permutation(self.epoch)
            out.append(self.tasks[int(self._order[self.position])])
            self.position += 1
        return out[self.rank::self.world_size]

    def state_dict(self) -> dict[str, int]:
        """The cursor: epoch and position within it."""
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed, "size": len(self.tasks)}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Restore a cursor saved by `state_dict` (the task set must be the same size)."""
        if int(state["size"]) != len(self.tasks):
            raise ValueError(f"checkpoint was made with {state['size']} training tasks, now there are "
                             f"{len(self.tasks)}; resume with the same data.train_tasks / data.train_limit")
        self.seed, self.epoch, self.position = int(state["seed"]), int(state["epoch"]), int(state["position"])
        self._order = self._permutation(self.epoch)


def round_seed(seed: int, step: int, round_index: int, rank: int = 0) -> int:
    """A 63-bit seed for rollout round `round_index` of training step `step` on process `rank`."""
    mixed = np.random.SeedSequence([seed, step, round_index, rank]).generate_state(2, dtype=np.uint32)
    return int((int(mixed[0]) << 31) ^ int(mixed[1]))


@dataclass
class Collected:
    """What the rollout stage of one step produced."""

    kept: list[Trajectory]
    """This process's trajectories entering the loss (group-major; `group_id` renumbered 0..G-1)."""
    all: list[Trajectory]
    """Every trajectory sampled this step (for accuracy, lengths and tool metrics)."""
    rounds: int = 0
    """Generation rounds used."""
    groups_kept: int = 0
    """Groups entering the loss, over all processes."""
    dropped_failed: int = 0
    """Trajectories dropped as world or verifier failures."""
    rollout_s: float = 0.0
    """Wall time of the rollout loop (generation, tools, rendering)."""
    generation_s: float = 0.0
    """Time inside `policy.generate` (from `RolloutBatch.stats`; 0 when the rollout reports none)."""
    tool_s: float = 0.0
    """Time of the concurrent `env.step` phases (tool calls, grading)."""
    render_s: float = 0.0
    """Recording turns and rendering injected messages (tokenizer + chat template)."""
    reset_s: float = 0.0
    """Creating and resetting the envs."""
    prefetch_s: float = 0.0
    """Wall time of round 0 in the rollout thread when it was played ahead (`rollout.async_steps`)."""


PlayFn = Callable[[list[Task], int, int], list[Trajectory]]
"""Plays one round: (tasks, group_size, seed) -> trajectories, task-major, `group_size` per task,
group_id = task index (`training.runtime.make_player` builds one with its sampling bound)."""


@dataclass(frozen=True, kw_only=True)
class CollectSettings:
    """How the rollout stage samples a step's groups (built once at setup, `from_config`)."""

    seed: int
    """Run seed (with the step and round, it seeds each round)."""
    prompts: int
    """Groups wanted per step."""
    per_round: int
    """Prompts drawn per round when dynamic sampling refills."""
    group_size: int
    """Completions per prompt."""
    dynamic_sampling: bool = False
    """Filter zero-variance groups and refill."""
    max_rounds: int = 0
    """Round limit (0 = unlimited)."""
    drop_failed: bool = True
    """Drop failed / verifier-failure episodes from the loss."""

    @classmethod
    def from_config(cls, cfg: TrainConfig, algo: stare.AlgoConfig) -> CollectSettings:
        """The settings of `cfg` (rollout section) and the resolved algorithm."""
        r = cfg.rollout
        per_round = r.prompts_per_round or r.prompts_per_step
        return cls(seed=cfg.seed, prompts=r.prompts_per_step, per_round=per_round, group_size=r.group_size,
                   dynamic_sampling=algo.dynamic_sampling,
                   max_rounds=algo.max_gen_rounds, drop_failed=r.drop_failed)

    def round_size(self, world: int) -> int:
        """Prompts each of `world` processes draws per round (`per_round` when refilling, else `prompts`)."""
        return share(self.per_round if self.dynamic_sampling else self.prompts, world)


def collect(play: PlayFn, stream: TaskStream, settings: CollectSettings, *, step: int,
            first_round: Any = None) -> Collected:
    """Sample groups until `prompts` groups are kept (DAPO dynamic sampling) or the round limit.

    Without dynamic sampling there is one round of `prompts` prompts and every group is kept.
    With it, each round draws `per_round` prompts; groups whose rewards are all equal are dropped
    (`stare.dynamic_sampling_keep` on the accuracy), and rounds continue until `prompts` groups are
    kept or `max_rounds` rounds ran (0 = unlimited); surplus groups are cut. When the limit is hit
    the step trains on the groups it has (possibly none), and `groups_kept` says so.

    With several processes (`stream.world_size` > 1) each plays its share of every round's prompts
    (whole groups: a prompt's n completions stay on one process), the stop test uses the kept count
    summed over processes, and the cut keeps the first `prompts` groups in global draw order, so
    the processes together keep the groups one process would. Advantages are then computed locally:
    exact, because a group never spans processes.

    Args:
        play: plays a round of episodes (see `PlayFn`).
        stream: the task cursor.
        settings: prompts, group size, dynamic sampling, round limit, dropping failures.
        step: training step (seeds the round).
        first_round: round 0 played ahead (`training.async_rollout.Prefetched`: its tasks were taken
            from `stream` and it was seeded with `round_seed(seed, step, 0, rank)`, as here); None =
            play round 0 here.
    """
    kept_groups: list[tuple[tuple[int, int], list[Trajectory]]] = []
    everything: list[Trajectory] = []
    rounds, dropped = 0, 0
    times = {"rollout_s": 0.0, "generation_s": 0.0, "tool_s": 0.0, "render_s": 0.0, "reset_s": 0.0}
    rank, world, c = stream.rank, stream.world_size, settings
    while True:
        start = time.perf_counter()
        if rounds == 0 and first_round is not None:
            num_tasks, trajs = first_round.num_tasks, first_round.trajectories
        else:
            tasks = stream.take(c.round_size(world))
            rs = round_seed(c.seed, step, rounds, rank)
            torch.manual_seed(rs)
            num_tasks, trajs = len(tasks), play(tasks, c.group_size, rs)
        times["rollout_s"] += time.perf_counter() - start
        stats = getattr(trajs, "stats", None)   # agents.RolloutBatch carries a time split
        for key in ("generation_s", "tool_s", "render_s", "reset_s"):
            times[key] += float(getattr(stats, key, 0.0))
        everything += trajs
        for local, group in enumerate(_split_groups(trajs, num_tasks, c.group_size)):
            usable = [t for t in group if not (c.drop_failed and is_failure(t))]
            dropped += len(group) - len(usable)
            if usable and (not c.dynamic_sampling or _has_variance(usable)):
                kept_groups.append(((rounds, local * world + rank), usable))   # key: global draw order
        rounds += 1
        total = int(distributed.all_sum(torch.tensor(len(kept_groups))))     # over all processes
        if not c.dynamic_sampling or total >= c.prompts or (c.max_rounds and rounds >= c.max_rounds):
            break
    mine = _first_groups([key for key, _ in kept_groups], c.prompts, world)
    groups = [group for key, group in kept_groups if key in mine]
    kept = [_regroup(t, g) for g, group in enumerate(groups) for t in group]
    return Collected(kept=kept, all=everything, rounds=rounds,
                     groups_kept=int(distributed.all_sum(torch.tensor(len(groups)))),
                     dropped_failed=dropped, **times)


def share(count: int, world: int) -> int:
    """Prompts per process when `world` processes share `count` prompts (whole prompts each)."""
    if count % world:
        raise ValueError(f"{count} prompts cannot be shared evenly by {world} processes; make "
                         "rollout.prompts_per_step and rollout.prompts_per_round multiples of the "
                         "process count")
    return count // world


def _first_groups(keys: list[tuple[int, int]], prompts: int, world: int) -> set[tuple[int, int]]:
    """This process's keys among the first `prompts` kept groups of all processes, in draw order.

    A group's key is (round, index of its prompt in the round's global draw), so the cut keeps
    exactly the groups one process would have kept; each process keeps its own whole groups.
    """
    if world == 1:
        return set(keys[:prompts])
    everyone = sorted(key for keys_r in distributed.gather_objects(keys) for key in keys_r)
    return set(keys) & set(everyone[:prompts])


def is_failure(traj: Trajectory) -> bool:
    """A world failure (`failed`) or a verifier failure (timeout/error): not the model's fault."""
    return bool(traj.failed) or traj.is_verifier_failure


def _has_variance(group: list[Trajectory]) -> bool:
    rewards = torch.tensor([t.reward for t in group], dtype=torch.float32)
    return bool(stare.dynamic_sampling_keep(rewards, torch.zeros(len(group), dtype=torch.long))[0])


def _split_groups(trajs: list[Trajectory], num_tasks: int, group_size: int) -> list[list[Trajectory]]:
    if len(trajs) != num_tasks * group_size:
        raise RuntimeError(f"rollout returned {len(trajs)} trajectories for {num_tasks} tasks × {group_size}")
    return [trajs[i * group_size:(i + 1) * group_size] for i in range(num_tasks)]


def _regroup(traj: Trajectory, group: int) -> Trajectory:
    traj.group_id = group
    return traj

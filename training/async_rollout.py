"""One-step off-policy rollouts: step s+1's first generation round plays while step s trains.

With `rollout.async_steps=1` the loop of a step becomes

    main thread                                     rollout thread
    ───────────────────────────────────────────     ───────────────────────────────────────
    wait for round 0 of step s (played by θ_{s-2})
    refill rounds of step s, if any (live θ_{s-1})
    snapshot θ_{s-1} into the rollout policy  ──►   play round 0 of step s+1 with θ_{s-1}
    update on step s's batch: θ_{s-1} → θ_s         (concurrently)

so the generation of one step overlaps the update of the previous one, and each prefetched
episode was sampled by the weights from one optimizer step before those it trains (policy lag 1,
as verl's one-step-off-policy trainer and PipelineRL/AReaL with a lag of one). The loss is unchanged:
the old-log-prob pass (or the fused update's own forward) recomputes log π_old under the current
weights, and the behaviour policy's log-probs μ that the episode recorded feed the mismatch metrics
(`rollout/logprob_abs_diff`, `rollout/kl`: here they measure the lag) and, with
`rollout.tis_cap` > 0, the truncated importance weight min(π_old/μ, C) per token.

What stays exactly as in a synchronous run: the prompts of every round (taken from the data
cursor in the same order), the seed of every round (`round_seed(seed, step, round, rank)`), and
the dynamic-sampling decisions (made in the main thread, with collectives). A run is deterministic
for its seed because nothing in the main thread draws from torch's global generator while a round
plays (the update samples nothing; evaluation and checkpoints first wait for the round in flight).
A checkpoint stores the prefetched round's episodes, so a resumed run trains on exactly the
episodes the straight run would have.

The snapshot: `rollout.engine=hf` plays on a private copy of the model whose tensors are
overwritten in place (`copy_`) at every launch; `rollout.engine=vllm` pushes the weights into the
engine at every launch (`SyncedVLLMPolicy.sync`) and never in between. Both happen in the main
thread, at the same point on every process.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

from agents.trajectory import Trajectory
from training import runtime
from training.sampling import PlayFn


@dataclass
class Prefetched:
    """Round 0 of a step, played ahead."""

    step: int
    """The training step it belongs to."""
    num_tasks: int
    """Prompts of the round (this process's share)."""
    trajectories: list[Trajectory]
    """The episodes, task-major, with whatever `.stats` the rollout attached."""
    seconds: float = 0.0
    """Wall time the round took in the rollout thread."""


class HFSnapshot:
    """A frozen copy of the policy for the rollout thread, refreshed by `sync` (in-place copies).

    The copy shares nothing with the training model, so the update may change the training
    weights while a round plays. `sync` copies every parameter and buffer (no reallocation, so an
    `agents.HFPolicy` built over `model` stays valid).
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = copy.deepcopy(model).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.pushes = 0

    def sync(self, source: torch.nn.Module) -> None:
        """Copy `source`'s parameters and buffers into the snapshot (same architecture)."""
        with torch.no_grad():
            mine = dict(self.model.named_parameters())
            for name, p in source.named_parameters():
                mine[name].copy_(p.detach())
            buffers = dict(self.model.named_buffers())
            for name, b in source.named_buffers():
                buffers[name].copy_(b)
        self.pushes += 1


class VLLMSnapshot:
    """The vLLM engine as the rollout thread's policy: weights pushed at `hold`, frozen until `release`.

    `policy` is the trainer's `SyncedVLLMPolicy`, shared with the main thread's rounds and
    evaluations: while a prefetched round plays its automatic push is off (an optimizer step in
    the main thread must not push half-updated weights mid-round), and `release` turns it back on
    so the main thread's next generation pushes the current weights first.
    """

    def __init__(self, policy: Any) -> None:
        self.policy = policy

    def hold(self) -> None:
        """Push the current weights (if stale) and freeze them."""
        self.policy.sync()
        self.policy.auto_sync = False

    def release(self) -> None:
        """Resume pushing before the first generation after an optimizer step."""
        self.policy.auto_sync = True


class RolloutPrefetcher:
    """Plays one round ahead in a background thread (see the module docstring).

    Args:
        play: (tasks, group_size, seed) -> trajectories over the snapshot's policy.
        hold: brings the snapshot to the current training weights and freezes it; called in the
            calling (main) thread by `launch`, never while a round plays.
        release: called once the round has played (default: nothing).
    """

    def __init__(self, play: PlayFn, hold: Callable[[], None],
                 release: Callable[[], None] | None = None) -> None:
        self.play = play
        self.hold = hold
        self.release = release or (lambda: None)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stare-rollout")
        self._future: Future[Prefetched] | None = None
        self._ready: Prefetched | None = None

    def launch(self, step: int, tasks: list[Any], group_size: int, seed: int) -> None:
        """Snapshot the weights, then start playing `tasks` (round 0 of `step`) with `seed`."""
        if self._future is not None or self._ready is not None:
            raise RuntimeError(f"a prefetched round is still pending; take it before launching step {step}")
        self.hold()
        threads = torch.get_num_threads()

        def run() -> Prefetched:
            start = time.perf_counter()
            torch.set_num_threads(threads)   # OpenMP's thread count is per thread: match the main thread's
            torch.manual_seed(seed)          # the main thread draws nothing while this plays
            trajs = self.play(tasks, group_size, seed)
            return Prefetched(step=step, num_tasks=len(tasks), trajectories=trajs,
                              seconds=time.perf_counter() - start)
        self._future = self._pool.submit(run)

    def wait(self) -> Prefetched | None:
        """Block until the round in flight (if any) has played; it stays pending for `take`."""
        if self._future is not None:
            future, self._future = self._future, None
            try:
                self._ready = future.result()      # re-raises the rollout thread's exception
            finally:
                self.release()
        return self._ready

    def take(self, step: int) -> Prefetched | None:
        """The prefetched round 0 of `step` (None when nothing was prefetched)."""
        ready = self.wait()
        if ready is None:
            return None
        if ready.step != step:
            raise RuntimeError(f"the prefetched round belongs to step {ready.step}, not {step}")
        self._ready = None
        return ready

    def state_dict(self) -> dict[str, Any] | None:
        """The pending round as JSON-able data (waits for it), or None."""
        ready = self.wait()
        if ready is None:
            return None
        return {"step": ready.step, "num_tasks": ready.num_tasks, "seconds": ready.seconds,
                "trajectories": [dataclasses.asdict(t) for t in ready.trajectories]}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """Restore a pending round saved by `state_dict` (None = nothing pending)."""
        if self._future is not None:
            raise RuntimeError("cannot restore a prefetched round while one is playing")
        self._ready = None if state is None else Prefetched(
            step=int(state["step"]), num_tasks=int(state["num_tasks"]), seconds=float(state["seconds"]),
            trajectories=[Trajectory(**t) for t in state["trajectories"]])

    def close(self) -> None:
        """Wait for the round in flight and stop the thread."""
        try:
            self.wait()
        finally:
            self._pool.shutdown(wait=True)


def make_prefetcher(cfg: Any, accelerator: Any, model: torch.nn.Module, tokenizer: Any, policy: Any,
                    make_player: Callable[[Any], PlayFn]) -> RolloutPrefetcher:
    """The prefetcher of a run with `rollout.async_steps=1`.

    Args:
        cfg: the `TrainConfig`.
        accelerator: the run's accelerator (its distributed type decides what can be snapshotted).
        model: the unwrapped training model.
        tokenizer: the run's tokenizer (for the snapshot's `HFPolicy`).
        policy: the run's rollout policy (`rollout.engine=vllm`: the `SyncedVLLMPolicy` to share).
        make_player: policy -> (tasks, group_size, seed) -> trajectories with the training sampling.
    """
    if cfg.rollout.engine == "vllm":
        snapshot = VLLMSnapshot(policy)
        return RolloutPrefetcher(make_player(policy), snapshot.hold, snapshot.release)
    kind = str(getattr(accelerator, "distributed_type", "")).upper()
    if "FSDP" in kind or "DEEPSPEED" in kind:
        raise ValueError("rollout.async_steps=1 with rollout.engine=hf copies the full weights into a "
                         "private rollout model, which FSDP / DeepSpeed shard; use rollout.engine=vllm "
                         "(its weight push gathers the shards) or rollout.async_steps=0")
    hf = HFSnapshot(model)
    return RolloutPrefetcher(make_player(runtime.make_policy(hf.model, tokenizer)), lambda: hf.sync(model))

"""The trainer's rollout engine: HF (the live model) or vLLM (weights pushed in after each step).

Two engines play the training episodes (`rollout.engine`):

- `hf`: `agents.HFPolicy` over the live training model (no copy; always the current weights).
- `vllm`: `agents.VLLMPolicy` built from the same model directory, wrapped in `SyncedVLLMPolicy`,
  which pushes the trainer's whole weights (gathered under FSDP / ZeRO-3) into the running engine
  (no reload) before the first generation that follows an optimizer step; one engine per process.

The log-probs either engine returns (`Trajectory.logprobs`, μ) are compared with the trainer's
old-log-prob pass, and optionally corrected for, by `stare.offpolicy` (docs/vllm.md).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from agents.policy import Completion, SamplingParams
from agents.vllm_policy import VLLMPolicy
from training.distributed import full_state_dict, iter_full_state, rank, sharding_kind, world_size


def vllm_kwargs(rollout_cfg: Any, model_dtype: str) -> dict[str, Any]:
    """`vllm.LLM` keyword arguments from the `rollout.vllm.*` keys."""
    kwargs: dict[str, Any] = {
        "dtype": rollout_cfg.vllm.dtype or model_dtype,
        "enforce_eager": rollout_cfg.vllm.enforce_eager,
        "gpu_memory_utilization": rollout_cfg.vllm.gpu_memory_utilization,
        "tensor_parallel_size": rollout_cfg.vllm.tensor_parallel_size,
    }
    if rollout_cfg.vllm.max_model_len:
        kwargs["max_model_len"] = rollout_cfg.vllm.max_model_len
    if rollout_cfg.vllm.device_ids:   # a separate device (vLLM's `device_ids` engine argument)
        kwargs["device_ids"] = list(rollout_cfg.vllm.device_ids)
    return kwargs


class SyncedVLLMPolicy:
    """A `Policy` over a vLLM engine that generates with the trainer's current weights.

    The first `generate` pushes the weights (this covers a checkpoint restored after start-up);
    afterwards a push happens before the first `generate` that follows an optimizer step over the
    model's parameters (a process-wide `torch.optim` step hook watches for it, so fused, foreach
    and accelerate-wrapped optimizers are all seen). Several generations between two optimizer
    steps (turns, dynamic-sampling rounds, evaluation) push nothing.

    The push sends the whole, unsharded weights (`training.distributed.iter_full_state`): under
    FSDP or ZeRO-3 that is a gather, a collective in which every process must take part. With
    several processes each holds its own engine (colocated), and the lazy push still lines up:
    every process steps its optimizer at the same steps (so all turn stale together), and the
    first generation after a step is the first turn of a rollout round (or of an evaluation),
    which every process plays with at least one prompt. Later turns, where processes may differ
    in how many generations they make, push nothing.

    With `auto_sync=False`, `generate` never pushes: the owner calls `sync()` (on every process,
    at the same point), e.g. a one-step-off-policy pipeline that generates step s+1 in a
    background thread while step s trains and syncs between the two; call it once before the
    first generation too, or the engine starts from the model directory's weights. `sync` and
    `generate` exclude each other (one lock), so a push never lands during a generation.

    Args:
        engine: an `agents.VLLMPolicy` (or anything with `generate` and `load_weights(state)`, where
            state is a state dict, or under sharding an iterator of (name, tensor) pairs).
        model: the training model: the unwrapped module, or under FSDP1 the root the accelerator
            prepared (`training.distributed.sharding_kind` refuses FSDP1 units without their root).
        auto_sync: push inside `generate` when the weights are stale (default); False = `sync()` only.
    """

    def __init__(self, engine: Any, model: torch.nn.Module, *, auto_sync: bool = True):
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self.engine = engine
        self.model = model
        self.auto_sync = auto_sync
        """Push inside `generate`; False: the owner calls `sync()`."""
        self.pushes = 0
        """Weight pushes so far."""
        self.sharding = sharding_kind(model)
        """`training.distributed.sharding_kind` of the model: full, fsdp1, fsdp2 or zero3."""
        self._stale = True
        self._lock = threading.RLock()
        self._params = {id(p) for p in model.parameters()}
        method = weakref.WeakMethod(self._on_step)   # the process-wide hook must not keep us alive

        def hook(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
            bound = method()
            if bound is not None:
                bound(optimizer, args, kwargs)
        self._hook = register_optimizer_step_post_hook(hook)
        weakref.finalize(self, self._hook.remove)

    def _on_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        # ZeRO-3's inner optimizer steps over DeepSpeed's flat partitions, not the model's
        # parameters, so there any optimizer step counts.
        if self.sharding == "zero3" or any(
                id(p) in self._params for group in optimizer.param_groups for p in group["params"]):
            self._stale = True

    def sync(self, *, force: bool = False) -> bool:
        """Push the weights now if an optimizer step happened since the last push (or `force`).

        Collective under FSDP / ZeRO-3 when it pushes: call it on every process at the same point.

        Returns:
            True if the weights were pushed.
        """
        with self._lock:
            if not (self._stale or force):
                return False
            with torch.no_grad():
                if self.sharding == "full":            # the live tensors: nothing to gather
                    self.engine.load_weights(full_state_dict(self.model))
                else:                                  # gathered one tensor at a time, as the engine loads
                    stream = iter_full_state(self.model)
                    self.engine.load_weights(stream)
                    for _ in stream:                   # the gathers are collectives: finish them all
                        pass
            self._stale, self.pushes = False, self.pushes + 1
            return True

    def generate(self, prompts: list[list[int]], sampling: SamplingParams) -> list[Completion]:
        """`engine.generate`, after `sync()` when `auto_sync`."""
        with self._lock:
            if self.auto_sync:
                self.sync()
            return self.engine.generate(prompts, sampling)

    def close(self) -> None:
        """Stop watching optimizer steps (also done when the policy is garbage-collected)."""
        self._hook.remove()


def colocated_kwargs(rollout_cfg: Any, world: int) -> dict[str, Any]:
    """The `vllm.LLM` arguments that give each of `world` training processes its own engine.

    With one process: none. With several (`torchrun` / `accelerate launch`), as TRL's
    `vllm_mode="colocate"`: `distributed_executor_backend="external_launcher"`, so each process's
    engine runs in that process (vLLM then turns `VLLM_ENABLE_V1_MULTIPROCESSING` off), joins the
    launcher's process group as a tensor-parallel group of one, and sits on the process's own
    device (`cuda:LOCAL_RANK`; the default single-process executor would put every engine on device 0).

    Raises:
        ValueError: `rollout.vllm.device_ids` or `rollout.vllm.tensor_parallel_size > 1` with
            several processes: every process plays its own prompts, so its engine can be
            neither moved to one shared device list nor shared across processes.
    """
    if world <= 1:
        return {}
    if rollout_cfg.vllm.device_ids or rollout_cfg.vllm.tensor_parallel_size != 1:
        raise ValueError(
            f"rollout.vllm.device_ids={list(rollout_cfg.vllm.device_ids)} / "
            f"rollout.vllm.tensor_parallel_size={rollout_cfg.vllm.tensor_parallel_size} with {world} "
            "training processes: each process builds its own engine on its own device (colocated); "
            "leave rollout.vllm.device_ids empty and set rollout.vllm.tensor_parallel_size=1")
    return {"distributed_executor_backend": "external_launcher"}


def make_vllm_policy(cfg: Any, model: torch.nn.Module, model_dir: Path, eos_token_ids: Sequence[int]
                     ) -> SyncedVLLMPolicy:
    """A `SyncedVLLMPolicy` over a vLLM engine built from `model_dir` with the `rollout.vllm.*` settings.

    Several processes: one colocated engine each (`colocated_kwargs`), seeded `seed + rank` (as TRL
    does; the player's per-request seeds differ across processes anyway). Every process must call
    this at the same point (the engines join the launcher's process group).
    """
    kwargs = vllm_kwargs(cfg.rollout, cfg.model.dtype) | colocated_kwargs(cfg.rollout, world_size())
    if cfg.model.tokenizer:
        kwargs["tokenizer"] = str(Path(cfg.model.tokenizer).expanduser())
    engine = VLLMPolicy(str(model_dir), eos_token_ids=eos_token_ids, seed=cfg.seed + rank(), **kwargs)
    return SyncedVLLMPolicy(engine, model)

"""Collectives the trainer needs across data-parallel processes (no-ops in one process).

Under `torchrun` / `accelerate launch` every process plays its share of the step's prompt groups
(whole groups, never split), then these helpers make the step's global quantities exact:

    all_sum(x)          Σ_ranks x                    (token counts, entropy·mask sums)
    gather_rows(x)      concat_ranks x (rows padded)  (STARE's global-batch candidates)
    gather_objects(o)   [o_rank0, o_rank1, ...]       (small per-round bookkeeping)
    full_state_dict(m)  the whole, unsharded weights  (FSDP1 / FSDP2 / ZeRO-3 gathered on every rank)

Everything goes through `torch.distributed` on the default group (gloo on CPU, NCCL on GPUs).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor


def world_size() -> int:
    """Number of processes in the default group (1 without torch.distributed)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    """This process's rank (0 without torch.distributed)."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _comm_device() -> torch.device:
    """Where collectives run: the current CUDA device for NCCL, else CPU."""
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_sum(value: Tensor) -> Tensor:
    """Σ over processes of `value` (any shape), returned on `value`'s device; identity in one process."""
    if world_size() == 1:
        return value
    out = value.detach().to(_comm_device()).clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out.to(value.device)


def all_max(value: int) -> int:
    """The maximum over processes of an integer (e.g. micro-batch counts: every process runs as many)."""
    if world_size() == 1:
        return int(value)
    out = torch.tensor([int(value)], dtype=torch.long, device=_comm_device())
    dist.all_reduce(out, op=dist.ReduceOp.MAX)
    return int(out.item())


def gather_rows(value: Tensor, *, pad: float = 0.0) -> Tensor:
    """Concatenate every process's (B_r, ...) tensor along dim 0, in rank order.

    Row counts and the trailing sizes (e.g. the response width R_r) may differ between processes;
    each is right-padded with `pad` to the largest before the all_gather, then cut back to its rows.

    Args:
        value: (B_r,) or (B_r, R_r) tensor of this process.
        pad: fill value for padded columns.

    Returns:
        (Σ_r B_r, ...) on `value`'s device, trailing dims at their maximum over processes.
    """
    if world_size() == 1:
        return value
    device = _comm_device()
    shape = torch.tensor(list(value.shape), dtype=torch.long, device=device)
    shapes = [torch.zeros_like(shape) for _ in range(world_size())]
    dist.all_gather(shapes, shape)
    shapes_t = torch.stack(shapes)                              # (W, ndim)
    biggest = shapes_t.max(0).values.tolist()
    padded = torch.full(biggest, pad, dtype=value.dtype, device=device)
    padded[tuple(slice(0, s) for s in value.shape)] = value.to(device)
    parts = [torch.empty_like(padded) for _ in range(world_size())]
    dist.all_gather(parts, padded)
    rows = [part[: int(s[0])] for part, s in zip(parts, shapes_t, strict=True)]
    return torch.cat(rows).to(value.device)


def gather_objects(obj: Any) -> list[Any]:
    """Every process's picklable `obj`, in rank order ([obj] in one process)."""
    if world_size() == 1:
        return [obj]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def row_offset(rows: int) -> int:
    """Index of this process's first row in the rank-ordered concatenation of every process's rows."""
    counts = gather_objects(int(rows))
    return int(sum(counts[: rank()]))


# ---------------------------------------------------------------------------- full weights under sharding

def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """Strip the DDP / DeepSpeedEngine wrapper (they hold the whole model in `.module`); FSDP stays."""
    from torch.nn.parallel import DistributedDataParallel
    while isinstance(model, DistributedDataParallel) or type(model).__name__ == "DeepSpeedEngine":
        model = model.module
    return model


def _is_fsdp1(module: torch.nn.Module) -> bool:
    if not dist.is_available():
        return False
    from torch.distributed.fsdp import FullyShardedDataParallel
    return isinstance(module, FullyShardedDataParallel)


def sharding_kind(model: torch.nn.Module) -> str:
    """How the model's parameters are laid out across processes.

    Returns:
        "fsdp1" (the root `FullyShardedDataParallel` instance), "fsdp2" (DTensor parameters, as
        `fully_shard` leaves them), "zero3" (DeepSpeed ZeRO-3 partitioned parameters) or "full"
        (single process, DDP, ZeRO-1/2: every process holds every weight).

    Raises:
        ValueError: FSDP1 units inside a module that is not their root (e.g. what
            `accelerator.unwrap_model` returns under FSDP1): gathering from there would make the
            inner units act as roots and break the training forward.
    """
    model = _unwrap(model)
    if _is_fsdp1(model):
        return "fsdp1"
    if any(_is_fsdp1(m) for m in model.modules()):
        raise ValueError("the model holds FSDP1 (FullyShardedDataParallel) units but is not their root: "
                         "pass the module the accelerator prepared (not `accelerator.unwrap_model(...)`), "
                         "or shard with FSDP2 (`fsdp_version: 2` in the accelerate config)")
    params = list(model.parameters())
    if any(hasattr(p, "ds_id") for p in params):
        return "zero3"
    if dist.is_available() and any(_is_dtensor(p) for p in params):
        return "fsdp2"
    return "full"


def _is_dtensor(value: Any) -> bool:
    from torch.distributed.tensor import DTensor
    return isinstance(value, DTensor)


def iter_full_state(model: torch.nn.Module) -> Iterator[tuple[str, Tensor]]:
    """The model's state dict with every tensor whole (unsharded), one entry at a time.

    Under sharding this is a sequence of collectives: **every process must iterate it to the end,
    in the same order** (they do when each calls it at the same point of the step). Each yielded
    tensor stays valid after the iteration moves on. Names are those of the unwrapped model's
    `state_dict()` (transformers names, no wrapper prefixes). Per layout (`sharding_kind`):

    - full (one process, DDP): the live tensors, detached; no copy, no communication.
    - fsdp2: `DTensor.full_tensor()` per entry, one all-gather of one parameter at a time; the
      result lives on the parameter's device. Peak extra memory: the tensors the caller keeps.
    - zero3: `deepspeed.zero.GatheredParameters` module by module (a layer's own parameters), each
      gathered parameter cloned before the module is re-partitioned; persistent buffers as they
      are (ZeRO-3 does not partition buffers). Tested with DeepSpeed 0.19.8's CPU accelerator.
    - fsdp1: `FSDP.state_dict_type(FULL_STATE_DICT, rank0_only=False, offload_to_cpu=False)`, which
      gathers FSDP unit by unit but returns the whole dict at once (one full copy on the device).

    Args:
        model: the prepared model (FSDP1 needs its root) or, for the other layouts, the unwrapped one.

    Yields:
        (name, tensor) with the unsharded shape of every state-dict entry.
    """
    kind = sharding_kind(model)
    model = _unwrap(model)
    if kind == "fsdp1":
        yield from _fsdp1_state(model).items()
    elif kind == "zero3":
        yield from _zero3_state(model)
    else:
        gather = kind == "fsdp2"
        for name, value in model.state_dict().items():
            if gather and _is_dtensor(value):
                value = value.full_tensor()          # all-gather of this one tensor
            yield name, value.detach()


def full_state_dict(model: torch.nn.Module) -> dict[str, Tensor]:
    """`dict(iter_full_state(model))`: the whole, unsharded state dict on every process (collective).

    Unlike `accelerator.get_state_dict` (FSDP / ZeRO-3: gathered to process 0 only, offloaded to the
    CPU), every process gets every tensor on its own device, as each colocated engine needs.
    """
    return dict(iter_full_state(model))


def _fsdp1_state(root: torch.nn.Module) -> dict[str, Tensor]:
    from torch.distributed.fsdp import FullStateDictConfig, StateDictType
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    config = FullStateDictConfig(offload_to_cpu=False, rank0_only=False)
    with FSDP.state_dict_type(root, StateDictType.FULL_STATE_DICT, config):
        return {name: value.detach() for name, value in root.state_dict().items()}


def _zero3_state(model: torch.nn.Module) -> Iterator[tuple[str, Tensor]]:
    import deepspeed  # only reached when the parameters carry DeepSpeed's `ds_id`
    for prefix, module in model.named_modules():
        head = f"{prefix}." if prefix else ""
        own = list(module.named_parameters(recurse=False))
        if own:
            with deepspeed.zero.GatheredParameters([p for _, p in own], modifier_rank=None):
                for name, param in own:
                    yield head + name, param.data.detach().clone()
        for name, buffer in module.named_buffers(recurse=False):
            if name not in module._non_persistent_buffers_set:
                yield head + name, buffer.detach()


def rollout_model(cfg: Any, accelerator: Any, model: Any) -> Any:
    """The module the rollout policy reads its weights from.

    `engine=hf` generates with the unwrapped model itself, so it needs every weight on every process
    (one process, DDP, ZeRO-1/2): under FSDP or ZeRO-3 it is refused. `engine=vllm` copies the weights
    into its engine, gathering shards (`training.distributed.iter_full_state`): it gets the unwrapped
    model, or under FSDP1 the prepared root (gathering from inside the root breaks FSDP1).
    """
    kind = sharding_kind(model)
    if cfg.rollout.engine == "hf" and kind != "full":
        raise ValueError(f"rollout.engine=hf generates with the training model itself, whose weights "
                         f"{kind} shards over processes; use rollout.engine=vllm (its weight push "
                         "gathers the shards) or data parallelism without sharding "
                         "(configs/accelerate/ddp.yaml)")
    return model if kind == "fsdp1" else accelerator.unwrap_model(model)

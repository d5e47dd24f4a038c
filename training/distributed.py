"""Collectives the trainer needs across data-parallel processes (no-ops in one process).

Under `torchrun` / `accelerate launch` every process plays its share of the step's prompt groups
(whole groups, never split), then these helpers make the step's global quantities exact:

    all_sum(x)          Σ_ranks x                    (token counts, entropy·mask sums)
    gather_rows(x)      concat_ranks x (rows padded)  (STARE's global-batch candidates)
    gather_objects(o)   [o_rank0, o_rank1, ...]       (small per-round bookkeeping)

Everything goes through `torch.distributed` on the default group (gloo on CPU, NCCL on GPUs).
"""

from __future__ import annotations

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

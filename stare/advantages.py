"""GRPO outcome advantages: per-group mean baseline, divided by the unbiased group std (verl's estimator)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def group_index(group_ids: Tensor | Sequence) -> Tensor:
    """Map arbitrary group ids to dense integers 0..G-1.

    Args:
        group_ids: (B,) integer tensor, or any sequence of hashable ids (e.g. prompt uid strings).

    Returns:
        (B,) int64 tensor of dense group indices, in order of first appearance for non-tensors.
    """
    if isinstance(group_ids, Tensor):
        if group_ids.dtype.is_floating_point or group_ids.dtype == torch.bool:
            raise TypeError(f"group_ids must hold integers, got dtype {group_ids.dtype}")
        return torch.unique(group_ids.reshape(-1), return_inverse=True)[1]
    dense: dict = {}
    return torch.tensor([dense.setdefault(g, len(dense)) for g in group_ids], dtype=torch.long)


def group_stats(values: Tensor, index: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-group count, mean and unbiased std, gathered back to each member.

    Vectorised with `index_add_` (no Python loop over groups).

    Args:
        values: (B,) float values.
        index: (B,) dense group index in [0, G).

    Returns:
        (count, mean, std), each (B,): the statistics of the member's group. `std` uses Bessel's
        correction (divide by n - 1); for a group of one it is NaN (callers decide).
    """
    num_groups = int(index.max()) + 1 if index.numel() else 0
    index = index.to(values.device)
    count = torch.zeros(num_groups, dtype=values.dtype, device=values.device).index_add_(
        0, index, torch.ones_like(values))
    total = torch.zeros_like(count).index_add_(0, index, values)
    mean = (total / count)[index]                                          # (B,)
    sq_dev = torch.zeros_like(count).index_add_(0, index, (values - mean) ** 2)
    std = (sq_dev / (count - 1)).sqrt()[index]                             # (B,); NaN when n = 1
    return count[index], mean, std


def grpo_advantages(rewards: Tensor, group_ids: Tensor | Sequence, *, norm_std: bool = True,
                    eps: float = 1e-6) -> Tensor:
    r"""GRPO outcome advantage of each sequence.

    For sequence i in group g with n_g members and rewards r:

        A_i = (r_i - mean_g(r)) / (std_g(r) + eps)     if norm_std
        A_i =  r_i - mean_g(r)                          otherwise

    where std_g is the *unbiased* std (torch.std, divide by n_g - 1), as verl's
    `compute_grpo_outcome_advantage` does. A group of one follows the reference too: verl sets its
    mean to 0 and its std to 1, so a singleton keeps its raw reward, A_i = r_i / (1 + eps)
    (or r_i without std normalisation). It is *not* zeroed. A group whose rewards are all equal gets
    A = 0 for every member.

    Args:
        rewards: (B,) scalar outcome reward per sequence.
        group_ids: (B,) group id per sequence (int tensor or a sequence of hashable ids).
        norm_std: divide by the group std (verl's `norm_adv_by_std_in_grpo`).
        eps: added to the std before dividing.

    Returns:
        (B,) advantages with the dtype of `rewards` (float32 for integer rewards). Broadcast to
        tokens with `adv[:, None] * mask` when a (B, T) tensor is needed.
    """
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D (B,), got shape {tuple(rewards.shape)}; "
                         "sum token-level rewards over T first")
    index = group_index(group_ids)
    if index.numel() != rewards.numel():
        raise ValueError(f"group_ids has {index.numel()} entries but rewards has {rewards.numel()}")
    values = rewards if rewards.dtype.is_floating_point else rewards.float()
    if values.numel() == 0:
        return values.clone()
    count, mean, std = group_stats(values, index)
    single = count == 1
    mean = torch.where(single, torch.zeros_like(mean), mean)
    if not norm_std:
        return values - mean
    std = torch.where(single, torch.ones_like(std), std)
    return (values - mean) / (std + eps)

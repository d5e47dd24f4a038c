"""DAPO's batch-side pieces: dynamic-sampling group filter, overlong soft punishment, truncation masking."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from stare.advantages import group_index


def dynamic_sampling_keep(metric: Tensor, group_ids: Tensor | Sequence) -> Tensor:
    """Keep mask of DAPO's dynamic sampling: drop groups whose metric has zero variance.

    A group is kept when its metric values are not all equal (max > min, the exact form of
    std > 0) or when it has a single member, as verl's DAPO trainer does
    (`std > 0 or len(vals) == 1`). Vectorised with `scatter_reduce` (no loop over groups).

    Args:
        metric: (B,) per-sequence metric (e.g. `acc` in {0, 1}; the reference filters on acc).
        group_ids: (B,) group id per sequence.

    Returns:
        (B,) bool: True for sequences of kept groups.
    """
    index = group_index(group_ids).to(metric.device)
    values = metric.float()
    num_groups = int(index.max()) + 1 if index.numel() else 0
    empty = torch.zeros(num_groups, dtype=values.dtype, device=values.device)
    high = empty.scatter_reduce(0, index, values, reduce="amax", include_self=False)
    low = empty.scatter_reduce(0, index, values, reduce="amin", include_self=False)
    count = torch.bincount(index, minlength=num_groups)
    keep = (high > low) | (count == 1)
    return keep[index]


def overlong_penalty(lengths: Tensor, max_length: int, buffer: int, factor: float = 1.0) -> Tensor:
    r"""DAPO's overlong soft punishment, added to the outcome reward.

        penalty(L) = min(0, -(L - (L_max - buffer)) / buffer) · factor

    0 up to L_max - buffer tokens, then falls linearly to -factor at L = L_max.

    Args:
        lengths: (B,) response lengths in tokens.
        max_length: L_max, the response-length budget.
        buffer: length of the punishment ramp, 0 < buffer <= max_length (DAPO: 4096 of 20480).
        factor: penalty at L_max (DAPO: 1.0).

    Returns:
        (B,) float32 penalties (<= 0).
    """
    if not 0 < buffer <= max_length:
        raise ValueError(f"overlong buffer must satisfy 0 < buffer <= max_length ({max_length}), "
                         f"got {buffer}")
    expected = max_length - buffer
    exceed = lengths.float() - expected
    return (-exceed / buffer * factor).clamp(max=0.0)


def truncated_mask(mask: Tensor, truncated: Tensor) -> Tensor:
    """Zero the loss mask of truncated completions (DAPO's overlong filtering).

    Args:
        mask: (B, T) loss mask.
        truncated: (B,) bool, True when the completion hit the length budget
            (finish_reason "length").

    Returns:
        (B, T) mask of the same dtype with the rows of truncated completions zeroed.
    """
    return mask * (~truncated.bool()).to(mask.dtype).unsqueeze(-1)

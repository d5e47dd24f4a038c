"""Entropy-side baselines: the adaptive entropy-bonus weight (Skywork-OR1) and forking-token training (80/20).

Neither changes the surrogate: the controller sets the weight of `stare.entropy_bonus`, and the
forking-token mask multiplies the per-token loss before the reduction (like STARE's ω).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch
from torch import Tensor


class EntropyCoefController:
    r"""Adaptive entropy-bonus coefficient toward a target entropy (Skywork-OR1, arXiv 2505.22312).

    update(H):
        if H is not finite: warn, change nothing
        coef = min(coef + delta, coef_max)  if H <= target  else  max(coef - delta, coef_min)
        entropy = H
    applied = coef if entropy <= target else 0          (the bonus acts only at or below the target)

    The loss then adds `entropy_bonus(H_tok, mask, coef=applied)`. Before the first update `entropy`
    is +inf, so the first step applies no bonus. This is TRL's `use_adaptive_entropy` rule
    (`GRPOTrainer._compute_loss`, TRL 1.16): increase on `<=`, decrease otherwise, both clipped.

    Args:
        coef: starting coefficient (TRL's `entropy_coef`).
        target: target token-mean entropy in nats (TRL's `entropy_target`).
        delta: step per update (TRL's `entropy_coef_delta`).
        coef_min: lower clip of the coefficient.
        coef_max: upper clip of the coefficient.
    """

    def __init__(self, coef: float = 0.0, target: float = 0.2, *, delta: float = 0.005, coef_min: float = 0.0,
                 coef_max: float = 1.0) -> None:
        if not 0.0 <= coef_min <= coef_max:
            raise ValueError(f"need 0 <= coef_min <= coef_max, got coef_min={coef_min}, coef_max={coef_max}")
        if delta < 0:
            raise ValueError(f"delta must be >= 0, got {delta}")
        self.coef = float(coef)
        self.target = float(target)
        self.delta = float(delta)
        self.coef_min = float(coef_min)
        self.coef_max = float(coef_max)
        self.entropy = math.inf

    def update(self, entropy: float) -> None:
        """Feed the step's token-mean entropy H; moves `coef` one step toward holding H at the target."""
        value = float(entropy)
        if not math.isfinite(value):
            warnings.warn(f"entropy controller got a non-finite entropy ({value}); keeping coef={self.coef}",
                          RuntimeWarning, stacklevel=2)
            return
        if value <= self.target:
            self.coef = min(self.coef + self.delta, self.coef_max)
        else:
            self.coef = max(self.coef - self.delta, self.coef_min)
        self.entropy = value

    @property
    def applied(self) -> float:
        """The weight the loss uses now: `coef` while the last entropy is at or below the target, else 0."""
        return self.coef if self.entropy <= self.target else 0.0

    def state_dict(self) -> dict[str, Any]:
        """Settings and mutable state (coef, entropy), for checkpoints."""
        return {"coef": self.coef, "target": self.target, "delta": self.delta, "coef_min": self.coef_min,
                "coef_max": self.coef_max, "entropy": self.entropy}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a `state_dict()`; unknown or missing keys raise `KeyError` naming them."""
        expected = set(self.state_dict())
        missing, unknown = expected - set(state), set(state) - expected
        if missing or unknown:
            raise KeyError(f"EntropyCoefController state mismatch: missing {sorted(missing)}, "
                           f"unknown {sorted(unknown)}")
        for key in expected:
            setattr(self, key, float(state[key]))

    def metrics(self) -> dict[str, float]:
        """`entropy_ctl/coef`, `/applied_coef`, `/batch_entropy` (inf before any update)."""
        return {"entropy_ctl/coef": self.coef, "entropy_ctl/applied_coef": self.applied,
                "entropy_ctl/batch_entropy": self.entropy}


def forking_token_mask(entropy: Tensor, mask: Tensor, top_ratio: float = 0.2) -> Tensor:
    r"""The high-entropy "forking" tokens: the top ρ of valid tokens by entropy (Wang et al., 2506.01939).

    With the n valid entropies sorted ascending as e_(0) <= ... <= e_(n-1) and q = 1 - ρ:

        rank = q·(n - 1) in float32,   lo = floor(rank),   hi = ceil(rank)
        τ    = lerp(e_(lo), e_(hi), rank - lo)            (torch.quantile's linear interpolation)
        keep = valid & (H >= τ)                           (every token tied at τ is kept)

    This is TRL's `get_high_entropy_mask` (`top_entropy_quantile = ρ`) on one process, computed with
    one `kthvalue` (e_(hi) follows from e_(lo) by a count and a min) instead of a gather and a sort.
    ρ = 1 keeps every valid token; ρ = 0 keeps the maximum. Multiply the per-token loss by it before
    the reduction: the dropped tokens still count in a token-mean's denominator, as in TRL.

    Args:
        entropy: (B, T) per-token entropy (any grad is ignored).
        mask: (B, T) 1 on trained tokens.
        top_ratio: ρ in [0, 1] (the paper: 0.2).

    Returns:
        (B, T) bool mask. One host synchronisation (the valid count).
    """
    if not 0.0 <= top_ratio <= 1.0:
        raise ValueError(f"top_ratio must lie in [0, 1], got {top_ratio!r}")
    valid = mask > 0
    values = entropy.detach().float()
    n = int(valid.sum())                                                             # the one sync
    if n == 0:
        return torch.zeros_like(valid)
    rank = torch.tensor(1.0 - top_ratio, dtype=torch.float32) * (n - 1)
    lo, hi = int(rank.floor()), int(rank.ceil())
    flat = torch.where(valid, values, float("inf")).reshape(-1)
    below = flat.kthvalue(lo + 1).values                                            # e_(lo)
    threshold = below
    if hi != lo:
        # e_(hi) without a second selection: e_(lo) again when more than hi values tie at or below it,
        # else the smallest value above it.
        tied = (flat <= below).sum()
        nearest = torch.where(flat > below, flat, float("inf")).min()
        above = torch.where(tied > hi, below, nearest)
        threshold = torch.lerp(below, above, (rank - lo).to(values.device))
    return valid & (values >= threshold)

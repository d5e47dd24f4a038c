"""STARE's token weights ω (STARE_SPEC §1.2): top-P surprisal tokens of each advantage sign, re-weighted.

One host synchronisation per call at most: the candidate counts travel to the host together (`k` must
be a Python int for `torch.topk`); the selection stays on device, and the statistics follow from the
host counts, so they cost nothing more.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

VARIANTS = ("O1", "C2")


class Selection(NamedTuple):
    """Candidate and selected token sets of one call, all (B, T) bool except the host counts."""

    valid: Tensor
    """mask > 0."""
    pos: Tensor
    """T+ = valid & (A > 0)."""
    neg: Tensor
    """T- = valid & (A < 0)."""
    top_pos: Tensor
    """L+: the k+ highest-surprisal tokens of T+."""
    top_neg: Tensor
    """L-: the k- highest-surprisal tokens of T- (empty unless requested)."""
    counts: tuple[int, int, int]
    """(|T+|, |T-|, |valid|) on the host."""
    k: tuple[int, int]
    """(|L+|, |L-|) on the host."""


def check_variant(variant: str) -> str:
    """Upper-case `variant` and check it is one of O1, C2 (the reference accepts 'o1', 'c2')."""
    name = str(variant).upper()
    if name not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS} (case-insensitive), got {variant!r}")
    return name


def check_ratio(top_ratio: float) -> float:
    """Convert `top_ratio` to float and check it lies in [0, 1]."""
    ratio = float(top_ratio)
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"top_ratio must lie in [0, 1], got {top_ratio!r}")
    return ratio


def top_count(count: int, top_ratio: float) -> int:
    """Tokens to select from a subset of `count` candidates: k = min(c, max(1, int(c·P + 0.999999))).

    0 when c = 0 or P <= 0. Computed in Python float64 like the reference, so 100·0.07 → 7 (not 8)
    and any non-empty subset gets at least one token (7 candidates at P = 0.1 → 1).
    """
    if count <= 0 or top_ratio <= 0:
        return 0
    return min(count, max(1, int(count * top_ratio + 0.999999)))


def top_k_mask(scores: Tensor, candidates: Tensor, k: int) -> Tensor:
    """(B, T) bool mask of the k highest-scoring candidates, flattened row-major; no sort, no sync.

    k must not exceed the number of candidates (callers compute it from the host count).
    """
    chosen = torch.zeros(candidates.numel(), dtype=torch.bool, device=candidates.device)
    if k > 0:
        # Non-candidates get -inf so they can never win while k <= |candidates| (also beats NaN/inf there).
        flat = torch.where(candidates, scores, float("-inf")).reshape(-1)
        chosen.scatter_(0, flat.topk(k, sorted=False).indices, True)
    return chosen.view_as(candidates)


def select_tokens(log_probs: Tensor, advantages: Tensor, mask: Tensor, *, top_ratio: float,
                  with_negative: bool) -> Selection:
    """Build T+, T- and their top-P surprisal subsets over the whole tensor passed in.

    Args:
        log_probs: (B, T) current-policy log-probs of the sampled tokens (detached here).
        advantages: (B, T) per-token or (B,) per-sequence advantages.
        mask: (B, T) 1 on trained response tokens.
        top_ratio: P in [0, 1].
        with_negative: also select L- (C2, statistics); otherwise L- is empty.

    Returns:
        A `Selection`. Costs exactly one host synchronisation (the counts).
    """
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    if adv.dim() != 2 or log_probs.dim() != 2 or mask.shape != log_probs.shape:
        raise ValueError(f"expected log_probs and mask (B, T) and advantages (B,) or (B, T); got "
                         f"{tuple(log_probs.shape)}, {tuple(mask.shape)}, {tuple(advantages.shape)}")
    valid = mask > 0                                                   # (B, T)
    pos = valid & (adv > 0)
    neg = valid & (adv < 0)
    n_pos, n_neg, n_valid = torch.stack([pos.sum(), neg.sum(), valid.sum()]).tolist()  # the one sync
    surprisal = -log_probs.detach()                                    # (B, T)
    k_pos = top_count(n_pos, top_ratio)
    k_neg = top_count(n_neg, top_ratio) if with_negative else 0
    top_pos = top_k_mask(surprisal, pos, k_pos)
    top_neg = top_k_mask(surprisal, neg, k_neg)
    return Selection(valid, pos, neg, top_pos, top_neg, (n_pos, n_neg, n_valid), (k_pos, k_neg))


def _apply(selection: Selection, dtype: torch.dtype, *, variant: str, w: float, m: float,
           gate_on: bool) -> Tensor:
    """ω = W on L+, M on L- (C2), 1 elsewhere; all ones when the gate is off."""
    weights = torch.ones(selection.valid.shape, dtype=dtype, device=selection.valid.device)
    if gate_on:
        weights = weights.masked_fill(selection.top_pos, w)
        if variant == "C2":
            weights = weights.masked_fill(selection.top_neg, m)
    return weights


def token_weights(log_probs: Tensor, advantages: Tensor, mask: Tensor, *, variant: str = "O1",
                  top_ratio: float = 0.1, w: float = 1.1, m: float = 0.9, gate_on: bool = True) -> Tensor:
    r"""STARE's per-token weight ω (STARE_SPEC §1.2).

    With s = -log_probs (detached surprisal), T+ = {mask & A > 0}, T- = {mask & A < 0}, taken over
    the whole (B, T) tensor (the quantile population is what you pass in), and in each subset of c
    candidates k = min(c, max(1, int(c·P + 0.999999))):

        L+ = top-k of s over T+          L- = top-k of s over T-   (C2 only; empty for O1)
        ω  = W on L+,  M on L- (C2),  1 elsewhere      (ω ≡ 1 when gate_on is False)

    Exactly k tokens per subset (ties: whatever `torch.topk` returns). Masked and zero-advantage
    tokens are never candidates and keep ω = 1.

    Args:
        log_probs: (B, T) current-policy log-probs of the sampled tokens (temperature-scaled).
        advantages: (B, T) per-token advantages (padding may hold anything) or (B,) per sequence.
        mask: (B, T) 1 on trained tokens, 0 on prompt, tool output and padding.
        variant: "O1" (boost L+) or "C2" (also damp L-); case-insensitive.
        top_ratio: P, the fraction of each sign subset to re-weight, in [0, 1].
        w: W, the weight of L+.
        m: M, the weight of L- (C2).
        gate_on: the entropy gate (`Controller.gate_on`); off gives ω ≡ 1.

    Returns:
        (B, T) weights with the dtype of `advantages` (so 1.1 is stored as float32 1.100000023841858).

    Raises:
        ValueError: for a variant other than O1/C2, or top_ratio outside [0, 1].
    """
    name, ratio = check_variant(variant), check_ratio(top_ratio)
    dtype = advantages.dtype if advantages.dtype.is_floating_point else torch.float32
    if not gate_on or ratio == 0.0:   # nothing is re-weighted: skip the selection and its sync
        return torch.ones(log_probs.shape, dtype=dtype, device=log_probs.device)
    selection = select_tokens(log_probs, advantages, mask, top_ratio=ratio, with_negative=name == "C2")
    return _apply(selection, dtype, variant=name, w=w, m=m, gate_on=True)


def token_weights_with_stats(log_probs: Tensor, advantages: Tensor, mask: Tensor, *, variant: str = "O1",
                             top_ratio: float = 0.1, w: float = 1.1, m: float = 0.9, gate_on: bool = True,
                             entropy: float = float("nan"), target_entropy: float = 0.3
                             ) -> tuple[Tensor, dict[str, Tensor]]:
    """`token_weights` plus the STARE_SPEC §1.5 statistics, with one host synchronisation in total.

    L+ and L- are built even when the gate is off (the statistics report their sizes) and L- is
    built only for C2. Each ratio divides by N_valid = max(1, #valid tokens).

    Args:
        log_probs: (B, T) current-policy log-probs of the sampled tokens.
        advantages: (B, T) per-token or (B,) per-sequence advantages.
        mask: (B, T) 1 on trained tokens.
        variant: "O1" or "C2" (case-insensitive).
        top_ratio: P in [0, 1].
        w: W, the weight of L+.
        m: M, the weight of L- (C2).
        gate_on: the entropy gate; off gives ω ≡ 1 but L± are still counted.
        entropy: the controller's current entropy (logged; NaN is logged as 0.0).
        target_entropy: the controller's target (logged only).

    Returns:
        (weights, stats): weights (B, T) as `token_weights`; stats maps the §1.5 names
        (`stare/gate_on`, `stare/positive_candidate_ratio`, ..., `stare/variant_is_c2`) to 0-dim
        float32 tensors on the **CPU**: after the one sync every value is known on the host (|L±| = k±
        exactly, so mean_weight = (N_valid + (W-1)·k+ + (M-1)·k-) / N_valid while the gate is on),
        so they cost no device work and logging them never stalls the device. On an empty mask
        every ratio, mean_weight included, is 0 (the reference's masked numerator).
    """
    name, ratio = check_variant(variant), check_ratio(top_ratio)
    dtype = advantages.dtype if advantages.dtype.is_floating_point else torch.float32
    sel = select_tokens(log_probs, advantages, mask, top_ratio=ratio, with_negative=name == "C2")
    weights = _apply(sel, dtype, variant=name, w=w, m=m, gate_on=gate_on)
    (n_pos, n_neg, n_real), (k_pos, k_neg) = sel.counts, sel.k
    n_valid = max(1, n_real)
    # Σ ω over valid tokens: 0 on an empty mask, so mean_weight is 0 there as in the reference.
    weight_sum = n_real + ((w - 1.0) * k_pos + (m - 1.0) * k_neg if gate_on else 0.0)
    values = {
        "stare/gate_on": float(gate_on),
        "stare/controller_entropy": 0.0 if entropy != entropy else float(entropy),
        "stare/target_entropy": float(target_entropy),
        "stare/top_ratio": ratio,
        "stare/positive_candidate_ratio": n_pos / n_valid,
        "stare/negative_candidate_ratio": n_neg / n_valid,
        "stare/positive_reweight_ratio": k_pos / n_valid,
        "stare/negative_reweight_ratio": k_neg / n_valid,
        "stare/mean_weight": weight_sum / n_valid,
        "stare/positive_weight": float(w),
        "stare/negative_weight": float(m),
        "stare/variant_is_c2": float(name == "C2"),
    }
    return weights, {key: torch.tensor(value, dtype=torch.float32) for key, value in values.items()}

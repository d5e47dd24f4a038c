"""Four-quadrant diagnostics: advantage sign × high/low surprisal (the paper's analysis of why entropy moves).

High surprisal = the top-P tokens of each sign subset by -log p, the very split STARE re-weights.
"""

from __future__ import annotations

import torch
from torch import Tensor

from stare.weights import check_ratio, select_tokens

QUADRANTS = ("pos_high", "pos_low", "neg_high", "neg_low")


def quadrant_metrics(log_probs: Tensor, advantages: Tensor, mask: Tensor, entropy: Tensor, *,
                     top_ratio: float = 0.1, weights: Tensor | None = None) -> dict[str, Tensor]:
    r"""Token share, |weighted advantage| share and mean entropy of each quadrant.

    Quadrants over valid tokens with A ≠ 0: pos/neg = sign of A; high = STARE's L± (top-k of the
    sign subset by surprisal, k = min(c, max(1, int(c·P + 0.999999)))), low = the rest.

        quadrant/<q>/token_share = |q| / N_valid           (zero-advantage tokens belong to no quadrant)
        quadrant/<q>/adv_share   = Σ_q |ω·A| / Σ_valid |ω·A|   (0 when the denominator is 0)
        quadrant/<q>/entropy     = mean of `entropy` over q   (0 for an empty quadrant)

    Args:
        log_probs: (B, T) current-policy log-probs of the sampled tokens.
        advantages: (B,) or (B, T).
        mask: (B, T) 1 on trained tokens.
        entropy: (B, T) per-token entropy.
        top_ratio: P, as in `token_weights`.
        weights: (B, T) ω applied in the loss, or None for ones.

    Returns:
        12 metrics as 0-dim float32 tensors; one host synchronisation (the candidate counts).
    """
    sel = select_tokens(log_probs, advantages, mask, top_ratio=check_ratio(top_ratio), with_negative=True)
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    magnitude = adv.detach().abs().float().expand_as(log_probs)
    if weights is not None:
        magnitude = magnitude * weights.detach().float()
    magnitude = magnitude * sel.valid
    total = magnitude.sum()
    sets = {"pos_high": sel.top_pos, "pos_low": sel.pos & ~sel.top_pos,
            "neg_high": sel.top_neg, "neg_low": sel.neg & ~sel.top_neg}
    n_valid = max(1, sel.counts[2])
    ent = entropy.detach().float()
    metrics = {}
    for name, members in sets.items():
        count = members.sum()
        metrics[f"quadrant/{name}/token_share"] = count.float() / n_valid
        share = (magnitude * members).sum() / total
        metrics[f"quadrant/{name}/adv_share"] = torch.where(total > 0, share, torch.zeros_like(share))
        metrics[f"quadrant/{name}/entropy"] = (ent * members).sum() / count.clamp(min=1)
    return metrics

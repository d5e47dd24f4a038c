"""Importance-ratio variants of the per-token loss: GSPO (sequence ratio) and CISPO (clipped IS weight).

Each returns the unreduced (B, T) loss and detached metrics, like `stare.clipped_surrogate`; the
reduction is a separate step (`stare.aggregate`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from stare.losses import masked_mean


def _per_token(advantages: Tensor) -> Tensor:
    """(B,) → (B, 1); (B, T) unchanged."""
    return advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages


def gspo_surrogate(log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor, mask: Tensor, *,
                   clip_low: float = 3e-4, clip_high: float = 4e-4) -> tuple[Tensor, dict[str, Tensor]]:
    r"""GSPO's clipped loss with a sequence-level importance ratio (Zheng et al. 2025, arXiv 2507.18071).

        log s_i  = Σ_t mask_it·(logp_it - logp_old_it) / max(1, Σ_t mask_it)        (length-normalised)
        log s_it = min(10, sg[log s_i] + logp_it - sg[logp_it])    (value s_i, gradient s_i·∇logp_it)
        l_it     = max(-A_it·s_it, -A_it·clip(s_it, 1 - ε_low, 1 + ε_high))           (no dual clip)

    Every token of a sequence shares the ratio and the clip decision; with `seq-mean-token-mean`
    the gradient is the paper's -A_i·s_i·(1/|y_i|)·Σ_t ∇logp_it on unclipped sequences.

    Args:
        log_probs: (B, T) current-policy log-probs (with grad).
        old_log_probs: (B, T) behaviour-policy log-probs.
        advantages: (B,) or (B, T) advantages.
        mask: (B, T) 1 on trained tokens.
        clip_low: ε_low (the paper: 3e-4).
        clip_high: ε_high (the paper: 4e-4).

    Returns:
        ((B, T) loss, metrics `actor/pg_clipfrac`, `actor/ppo_kl`, `actor/pg_clipfrac_lower` (= 0)).
    """
    adv = _per_token(advantages)
    maskf = mask.to(log_probs.dtype)
    delta = log_probs - old_log_probs                                              # (B, T)
    seq_log_ratio = (delta * maskf).sum(-1) / maskf.sum(-1).clamp(min=1)           # (B,)
    log_ratio = log_probs - log_probs.detach() + seq_log_ratio.detach().unsqueeze(-1)
    ratio = log_ratio.clamp(max=10.0).exp()                                        # (B, T)
    l1 = -adv * ratio
    l2 = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(l1, l2)
    with torch.no_grad():
        metrics = {"actor/pg_clipfrac": masked_mean((l2 > l1).float(), mask),
                   "actor/ppo_kl": masked_mean(-delta, mask),
                   "actor/pg_clipfrac_lower": torch.zeros((), device=loss.device)}
    return loss, metrics


def cispo_surrogate(log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor, mask: Tensor, *,
                    clip_low: float = 1.0, clip_high: float = 4.0) -> tuple[Tensor, dict[str, Tensor]]:
    r"""CISPO: a REINFORCE term weighted by the clipped, stop-gradient IS ratio (MiniMax-M1, 2506.13585).

        r_it = exp(clamp(logp_it - logp_old_it, -20, 20))
        l_it = -sg[clip(r_it, 1 - ε_low, 1 + ε_high)] · A_it · logp_it

    Unlike PPO no token loses its gradient: the clip only bounds the weight. `clip_low = 1` leaves
    no lower bound (r > 0), the paper's setting; TRL's `epsilon_high = ε_max` is `clip_high = ε_max - 1`.

    Args:
        log_probs: (B, T) current-policy log-probs (with grad).
        old_log_probs: (B, T) behaviour-policy log-probs.
        advantages: (B,) or (B, T) advantages.
        mask: (B, T) 1 on trained tokens.
        clip_low: ε_low in [0, 1]; 1 = no lower bound.
        clip_high: ε_high > 0 (ScaleRL's ε_max = 5 is 4 here).

    Returns:
        ((B, T) loss, metrics `actor/pg_clipfrac` = frac(weight was clipped), `actor/ppo_kl`,
        `actor/pg_clipfrac_lower` (= 0)).
    """
    adv = _per_token(advantages)
    delta = (log_probs - old_log_probs).clamp(-20.0, 20.0)                          # (B, T)
    ratio = delta.exp()
    weight = ratio.clamp(1.0 - clip_low, 1.0 + clip_high).detach()
    loss = -weight * adv * log_probs
    with torch.no_grad():
        metrics = {"actor/pg_clipfrac": masked_mean((ratio != weight).float(), mask),
                   "actor/ppo_kl": masked_mean(-delta, mask),
                   "actor/pg_clipfrac_lower": torch.zeros((), device=loss.device)}
    return loss, metrics

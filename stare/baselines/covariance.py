"""Clip-Cov and KL-Cov: covariance-based token selection against entropy collapse (Cui et al., 2505.22617).

The entropy change of a softmax policy follows the covariance between a token's log-prob and its
advantage; tokens with a large positive covariance (confident and rewarded) drive entropy down.
Clip-Cov detaches a few of them from the gradient; KL-Cov puts a |log-ratio| penalty on the top ones.
Each returns the unreduced (B, T) loss and detached metrics; reduce with `stare.aggregate`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from stare.losses import masked_mean
from stare.weights import top_k_mask


def token_covariance(log_probs: Tensor, advantages: Tensor, mask: Tensor) -> Tensor:
    r"""Per-token covariance term, detached: (A_it - Ā)·(logp_it - mean logp), both means over valid tokens.

    Args:
        log_probs: (B, T) current-policy log-probs.
        advantages: (B,) or (B, T) advantages (a per-sequence value counts once per token).
        mask: (B, T) 1 on trained tokens.

    Returns:
        (B, T) float covariance terms (garbage on masked positions; callers mask them).
    """
    logp = log_probs.detach()
    adv = advantages.detach().unsqueeze(-1) if advantages.dim() == 1 else advantages.detach()
    adv = adv.expand_as(logp).to(logp.dtype)
    return (adv - masked_mean(adv, mask)) * (logp - masked_mean(logp, mask))


def _ratio_losses(log_probs: Tensor, old_log_probs: Tensor,
                  advantages: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(Δ, r, -A·r), all (B, T); Δ = clamp(logp - logp_old, -20, 20), r = exp(Δ)."""
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    delta = (log_probs - old_log_probs).clamp(-20.0, 20.0)
    ratio = delta.exp()
    return delta, ratio, -adv * ratio


def clip_cov_surrogate(log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor, mask: Tensor, *,
                       clip_low: float = 0.2, clip_high: float = 0.2, cov_ratio: float = 2e-4,
                       cov_lb: float = 1.0, cov_ub: float = 5.0,
                       generator: torch.Generator | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    r"""Clip-Cov: the PPO clipped loss with a random few high-covariance tokens cut from the gradient.

        l_it   = max(-A·r, -A·clip(r, 1 - ε_low, 1 + ε_high))                  (no dual clip)
        C      = {valid, not already clipped, cov_lb < cov_it < cov_ub}          (`token_covariance`)
        k      = min(|C|, max(1, int(cov_ratio · N_valid)))
        D      = k tokens of C drawn uniformly without replacement
        loss   = l_it · (0 on D, 1 elsewhere)

    verl (`compute_policy_loss_clip_cov`) draws D with `torch.randperm` over C; here each candidate
    gets a uniform key and the k largest win, the same distribution without a boolean gather.

    Args:
        log_probs: (B, T) current-policy log-probs (with grad).
        old_log_probs: (B, T) behaviour-policy log-probs.
        advantages: (B,) or (B, T) advantages.
        mask: (B, T) 1 on trained tokens.
        clip_low: ε_low.
        clip_high: ε_high.
        cov_ratio: fraction of valid tokens detached (verl's clip_cov_ratio, default 2e-4).
        cov_lb: lower covariance bound of the candidates (clip_cov_lb).
        cov_ub: upper covariance bound (clip_cov_ub).
        generator: random generator on the tensors' device for the draw.

    Returns:
        ((B, T) loss, metrics): `actor/pg_clipfrac` = |D| / N_valid (verl's meaning here),
        `actor/ppo_kl`, `actor/pg_clipfrac_lower` (= 0), `actor/cov_selected_frac` = |D| / N_valid.
        One host synchronisation (the counts).
    """
    if cov_ratio <= 0:
        raise ValueError(f"cov_ratio must be > 0 (fraction of tokens to detach), got {cov_ratio}")
    delta, ratio, l1 = _ratio_losses(log_probs, old_log_probs, advantages)
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    l2 = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    valid = mask > 0
    cov = token_covariance(log_probs, advantages, mask)
    candidates = valid & ~(l2 > l1) & (cov > cov_lb) & (cov < cov_ub)
    n_valid, n_cand = torch.stack([valid.sum(), candidates.sum()]).tolist()        # the one sync
    k = min(n_cand, max(1, int(cov_ratio * n_valid)))
    keys = torch.rand(cov.shape, generator=generator, device=cov.device)
    detached = top_k_mask(keys, candidates, k)
    loss = torch.maximum(l1, l2) * (~detached).to(l1.dtype)
    with torch.no_grad():
        frac = torch.tensor(k / max(1, n_valid), dtype=torch.float32)
        metrics = {"actor/pg_clipfrac": frac, "actor/ppo_kl": masked_mean(-delta, mask),
                   "actor/pg_clipfrac_lower": torch.zeros(()), "actor/cov_selected_frac": frac}
    return loss, metrics


def kl_cov_surrogate(log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor, mask: Tensor, *,
                     cov_ratio: float = 2e-4, kl_coef: float = 1.0) -> tuple[Tensor, dict[str, Tensor]]:
    r"""KL-Cov: the unclipped policy-gradient loss plus a |log-ratio| penalty on the top-covariance tokens.

        l_it = -A·r                                 (no ratio clipping at all)
        K    = the k valid tokens of largest cov_it,  k = max(1, int(cov_ratio · N_valid))  (0 if none valid)
        loss = l_it + kl_coef·|logp_it - logp_old_it|   on K;   l_it elsewhere

    As verl's `compute_policy_loss_kl_cov`; ties at the k-th covariance are whatever `torch.topk` picks.

    Args:
        log_probs: (B, T) current-policy log-probs (with grad).
        old_log_probs: (B, T) behaviour-policy log-probs.
        advantages: (B,) or (B, T) advantages.
        mask: (B, T) 1 on trained tokens.
        cov_ratio: fraction of valid tokens penalised (verl's kl_cov_ratio, default 2e-4).
        kl_coef: penalty weight (verl's ppo_kl_coef, default 1).

    Returns:
        ((B, T) loss, metrics `actor/pg_clipfrac` (= 0), `actor/ppo_kl`, `actor/pg_clipfrac_lower`
        (= 0), `actor/cov_selected_frac` = k / N_valid). One host synchronisation (the count).
    """
    if cov_ratio <= 0:
        raise ValueError(f"cov_ratio must be > 0 (fraction of tokens to penalise), got {cov_ratio}")
    delta, _, l1 = _ratio_losses(log_probs, old_log_probs, advantages)
    valid = mask > 0
    n_valid = int(valid.sum())                                                     # the one sync
    k = max(1, int(n_valid * cov_ratio)) if n_valid else 0
    chosen = top_k_mask(token_covariance(log_probs, advantages, mask), valid, k)
    loss = torch.where(chosen, l1 + kl_coef * delta.abs(), l1)
    with torch.no_grad():
        zero = torch.zeros(())
        metrics = {"actor/pg_clipfrac": zero, "actor/ppo_kl": masked_mean(-delta, mask),
                   "actor/pg_clipfrac_lower": zero.clone(),
                   "actor/cov_selected_frac": torch.tensor(k / max(1, n_valid), dtype=torch.float32)}
    return loss, metrics

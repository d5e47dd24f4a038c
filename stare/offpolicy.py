"""Off-policy correction between the rollout engine's distribution μ and the trainer's π_old.

Whatever the engine (HF, vLLM), the log-probs it returns (μ) and the trainer's old-log-prob pass
(π_old) differ by numerics (kernels, dtypes, batch shapes), and by a whole policy version when
rollouts are played one step ahead. Per step, over the loss-mask tokens only (N = Σ mask):

    rollout/logprob_abs_diff = Σ |log π_old − log μ| · mask / N
    rollout/kl               = Σ (r − 1 − log r) · mask / N,   r = π_old / μ = exp(log π_old − log μ)

(`kl` is the k3 estimator of KL(μ ‖ π_old) from samples of μ: unbiased and ≥ 0 per token.)
Truncated importance sampling (TIS, as in verl and TRL) multiplies each token's policy loss by

    w_t = min(exp(log π_old,t − log μ_t), C)        (C = `rollout.tis_cap`; 0 = off)

which turns the update into an estimate under the trainer's own distribution; the per-token loss
weight is then ω_t · w_t (STARE's ω times the TIS weight).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor


def logprob_mismatch(old_log_probs: Tensor, rollout_log_probs: Tensor, mask: Tensor,
                     reduce: Callable[[Tensor], Tensor] | None = None) -> dict[str, float]:
    """Mean |Δ log-prob| and the k3 KL estimate between rollout and trainer, on loss-mask tokens.

    Args:
        old_log_probs: (B, R) log π_old from the trainer's old-log-prob pass.
        rollout_log_probs: (B, R) log μ returned by the rollout engine.
        mask: (B, R) 1 on trained (sampled) tokens.
        reduce: sums a (3,) float64 tensor over processes (e.g. an all-reduce), so the means are
            over the global batch; None = this process only.

    Returns:
        {"rollout/logprob_abs_diff", "rollout/kl"}; both 0.0 when the mask is empty.
    """
    mask = mask.to(torch.float64)
    delta = (old_log_probs.to(torch.float64) - rollout_log_probs.to(torch.float64)) * mask
    k3 = torch.expm1(delta) - delta            # r − 1 − log r with log r = Δ; exactly 0 where mask = 0
    sums = torch.stack([delta.abs().sum(), k3.sum(), mask.sum()])
    if reduce is not None:
        sums = reduce(sums)
    abs_sum, kl_sum, count = (float(v) for v in sums)
    if count == 0:
        return {"rollout/logprob_abs_diff": 0.0, "rollout/kl": 0.0}
    return {"rollout/logprob_abs_diff": abs_sum / count, "rollout/kl": kl_sum / count}


def tis_weights(old_log_probs: Tensor, rollout_log_probs: Tensor, cap: float) -> Tensor:
    """Truncated importance weights w = min(exp(log π_old − log μ), C), no gradient.

    Args:
        old_log_probs: (B, R) log π_old.
        rollout_log_probs: (B, R) log μ.
        cap: C > 0.

    Returns:
        (B, R) float32 weights (padding positions give exp(0) = 1; the loss mask removes them).
    """
    if cap <= 0:
        raise ValueError(f"rollout.tis_cap must be > 0 to compute TIS weights (0 = off), got {cap}")
    delta = (old_log_probs.detach().float() - rollout_log_probs.detach().float()).clamp(max=20.0)
    return torch.exp(delta).clamp(max=cap)


def combine_weights(weights: Tensor | None, tis: Tensor | None) -> Tensor | None:
    """ω · w_TIS per token, (B, R), where either may be absent (None = all ones)."""
    if tis is None:
        return weights
    if weights is None:
        return tis
    return weights * tis.to(weights.device, weights.dtype)

"""The policy loss an `AlgoConfig` selects: surrogate (loss_mode), forking-token mask, ω, then the reduction.

    loss = aggregate(ω ⊙ F ⊙ l_mode, mask, loss_agg)

l_mode is the per-token surrogate of `loss_mode`, F the forking-token mask (all ones unless
`top_entropy_ratio < 1`), ω STARE's token weights (or ones). Each step is a separate named function.
"""

from __future__ import annotations

import torch
from torch import Tensor

from stare.baselines.covariance import clip_cov_surrogate, kl_cov_surrogate
from stare.baselines.entropy import forking_token_mask
from stare.baselines.ratio import cispo_surrogate, gspo_surrogate
from stare.config import AlgoConfig
from stare.losses import aggregate, clipped_surrogate


def surrogate(algo: AlgoConfig, log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor, mask: Tensor, *,
              generator: torch.Generator | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """The unreduced (B, T) per-token loss of `algo.loss_mode` and its detached metrics.

    Args:
        algo: the settings (loss_mode, clip_low/high/c, the Clip-Cov / KL-Cov fields).
        log_probs: (B, T) current-policy log-probs (with grad).
        old_log_probs: (B, T) behaviour-policy log-probs.
        advantages: (B,) or (B, T) advantages.
        mask: (B, T) 1 on trained tokens.
        generator: random generator for Clip-Cov's draw.
    """
    args = (log_probs, old_log_probs, advantages, mask)
    clip = {"clip_low": algo.clip_low, "clip_high": algo.clip_high}
    if algo.loss_mode == "vanilla":
        return clipped_surrogate(*args, **clip, clip_c=algo.clip_c)
    if algo.loss_mode == "gspo":
        return gspo_surrogate(*args, **clip)
    if algo.loss_mode == "cispo":
        return cispo_surrogate(*args, **clip)
    if algo.loss_mode == "clip_cov":
        return clip_cov_surrogate(*args, **clip, cov_ratio=algo.clip_cov_ratio, cov_lb=algo.clip_cov_lb,
                                  cov_ub=algo.clip_cov_ub, generator=generator)
    if algo.loss_mode == "kl_cov":
        return kl_cov_surrogate(*args, cov_ratio=algo.kl_cov_ratio, kl_coef=algo.kl_cov_coef)
    raise ValueError(f"AlgoConfig.loss_mode {algo.loss_mode!r} is unknown; use one of vanilla, gspo, cispo, "
                     "clip_cov, kl_cov")


def algo_policy_loss(algo: AlgoConfig, log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor,
                     mask: Tensor, *, entropy: Tensor | None = None, weights: Tensor | None = None,
                     num_tokens: float | Tensor | None = None, num_seqs: float | Tensor | None = None,
                     norm_length: int | None = None, generator: torch.Generator | None = None
                     ) -> tuple[Tensor, dict[str, Tensor]]:
    r"""The selected loss, aggregate(ω ⊙ F ⊙ l_mode, mask, loss_agg); vanilla with F ≡ 1 is `policy_loss`.

    Args:
        algo: the settings.
        log_probs: (B, T) current-policy log-probs (with grad).
        old_log_probs: (B, T) behaviour-policy log-probs.
        advantages: (B,) or (B, T) advantages.
        mask: (B, T) 1 on trained tokens.
        entropy: (B, T) per-token entropy; required when `algo.top_entropy_ratio < 1`.
        weights: (B, T) STARE's ω, or None.
        num_tokens: global token count for token-mean (see `aggregate`).
        num_seqs: global sequence count for the sequence modes.
        norm_length: L of seq-mean-token-sum-norm; default `algo.loss_norm_length`, then T.
        generator: random generator for Clip-Cov.

    Returns:
        (0-dim loss with grad, detached metrics incl. `actor/pg_loss` and, for forking tokens,
        `actor/forking_token_frac` = |F| / N_valid).
    """
    loss_mat, metrics = surrogate(algo, log_probs, old_log_probs, advantages, mask, generator=generator)
    if algo.top_entropy_ratio < 1.0:
        if entropy is None:
            raise ValueError("AlgoConfig.top_entropy_ratio < 1 (forking tokens) needs the per-token entropy; "
                             "pass entropy=")
        forking = forking_token_mask(entropy, mask, algo.top_entropy_ratio)
        loss_mat = loss_mat * forking.to(loss_mat.dtype)
        with torch.no_grad():
            valid = (mask > 0).sum().clamp(min=1)
            metrics["actor/forking_token_frac"] = forking.sum() / valid
    if weights is not None:
        loss_mat = loss_mat * weights
    length = norm_length if norm_length is not None else (algo.loss_norm_length or None)
    loss = aggregate(loss_mat, mask, algo.loss_agg, num_tokens=num_tokens, num_seqs=num_seqs,
                     norm_length=length)
    metrics["actor/pg_loss"] = loss.detach()
    return loss, metrics

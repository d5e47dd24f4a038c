"""Published remedies for entropy collapse beside STARE, as pure per-token functions (docs/stare.md).

Dr. GRPO needs no function of its own: `grpo_advantages(..., norm_std=False)` and the
`seq-mean-token-sum-norm` reduction of `stare.aggregate`.
"""

from stare.baselines.covariance import clip_cov_surrogate, kl_cov_surrogate, token_covariance
from stare.baselines.entropy import EntropyCoefController, forking_token_mask
from stare.baselines.ratio import cispo_surrogate, gspo_surrogate

__all__ = ["EntropyCoefController", "cispo_surrogate", "clip_cov_surrogate", "forking_token_mask",
           "gspo_surrogate", "kl_cov_surrogate", "token_covariance"]

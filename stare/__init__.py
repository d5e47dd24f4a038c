"""STARE (surprisal-guided token reweighting with a target-entropy gate), GRPO, DAPO and the baselines.

Pure tensor code (torch and numpy only). See docs/stare.md.
"""

from stare.advantages import grpo_advantages
from stare.baselines import (
    EntropyCoefController,
    cispo_surrogate,
    clip_cov_surrogate,
    forking_token_mask,
    gspo_surrogate,
    kl_cov_surrogate,
    token_covariance,
)
from stare.config import LOSS_MODES, PRESETS, AlgoConfig, StareConfig, get_preset
from stare.controller import Controller
from stare.dapo import dynamic_sampling_keep, overlong_penalty, truncated_mask
from stare.diagnostics import quadrant_metrics
from stare.losses import (
    AGGREGATIONS,
    aggregate,
    clipped_surrogate,
    entropy_bonus,
    kl_penalty,
    masked_mean,
    policy_loss,
    token_logprobs_and_entropy,
)
from stare.objective import algo_policy_loss, surrogate
from stare.offpolicy import combine_weights, logprob_mismatch, tis_weights
from stare.weights import select_tokens, token_weights, token_weights_with_stats, top_count

__all__ = [
    "AGGREGATIONS", "LOSS_MODES", "PRESETS", "AlgoConfig", "Controller", "EntropyCoefController",
    "StareConfig", "aggregate", "algo_policy_loss", "cispo_surrogate", "clip_cov_surrogate",
    "clipped_surrogate", "combine_weights", "dynamic_sampling_keep", "entropy_bonus", "forking_token_mask",
    "get_preset", "grpo_advantages", "gspo_surrogate", "kl_cov_surrogate", "kl_penalty", "logprob_mismatch",
    "masked_mean", "overlong_penalty", "policy_loss", "quadrant_metrics", "select_tokens", "surrogate",
    "tis_weights", "token_covariance", "token_logprobs_and_entropy",
    "token_weights", "token_weights_with_stats", "top_count", "truncated_mask",
]

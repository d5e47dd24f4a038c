"""STARE: surprisal-guided token-level advantage reweighting with a target-entropy gate, plus GRPO and DAPO.

Pure tensor code (torch and numpy only). See docs/stare.md.
"""

from stare.advantages import grpo_advantages
from stare.config import PRESETS, AlgoConfig, StareConfig, get_preset
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
from stare.offpolicy import combine_weights, logprob_mismatch, tis_weights
from stare.weights import select_tokens, token_weights, token_weights_with_stats, top_count

__all__ = [
    "AGGREGATIONS", "PRESETS", "AlgoConfig", "Controller", "StareConfig", "aggregate", "clipped_surrogate",
    "combine_weights", "logprob_mismatch", "tis_weights",
    "dynamic_sampling_keep", "entropy_bonus", "get_preset", "grpo_advantages", "kl_penalty", "masked_mean",
    "overlong_penalty", "policy_loss", "quadrant_metrics", "select_tokens", "token_logprobs_and_entropy",
    "token_weights", "token_weights_with_stats", "top_count", "truncated_mask",
]

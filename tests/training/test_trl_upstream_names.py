"""StareGRPOTrainer and TRL's own STARE (pull request #6167): shared setting names, no double weighting."""

import types

import pytest

pytest.importorskip("trl")

from training.integrations.trl import (  # noqa: E402
    CLIPPED_LOSS_TYPES,
    UPSTREAM_FIELDS,
    check_trl_settings,
    stare_config_from_grpo_args,
)


def test_upstream_grpo_config_fields_map_onto_stare_config():
    args = types.SimpleNamespace(stare_variant="c2", stare_top_p_ratio=0.2, stare_reweight_w=1.05,
                                 stare_reweight_m=0.95, stare_target_entropy=0.4)
    cfg = stare_config_from_grpo_args(args)
    assert (cfg.enabled, cfg.variant, cfg.top_ratio, cfg.w, cfg.m, cfg.target_entropy) == \
        (True, "C2", 0.2, 1.05, 0.95, 0.4)
    assert cfg.scope == "micro_batch" and not cfg.adaptive
    partial = stare_config_from_grpo_args(types.SimpleNamespace(stare_reweight_w=1.3))
    assert (partial.w, partial.variant, partial.top_ratio, partial.target_entropy) == (1.3, "O1", 0.1, 0.3)
    assert stare_config_from_grpo_args(types.SimpleNamespace(loss_type="dapo")) is None
    assert set(UPSTREAM_FIELDS.values()) == {"stare_variant", "stare_top_p_ratio", "stare_reweight_w",
                                             "stare_reweight_m", "stare_target_entropy"}


def test_loss_type_stare_is_refused_so_tokens_are_not_weighted_twice():
    with pytest.raises(ValueError, match="TRL's own STARE"):
        check_trl_settings("stare", "token")
    with pytest.raises(ValueError, match="needs a clipped PPO loss"):
        check_trl_settings("cispo", "token")
    with pytest.raises(ValueError, match="importance_sampling_level"):
        check_trl_settings("dapo", "sequence")
    for loss_type in CLIPPED_LOSS_TYPES:
        check_trl_settings(loss_type, "token")

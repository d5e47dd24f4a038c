"""One test per known pitfall of the STARE semantics (docs/stare.md), named after what it pins down."""

import math

import pytest
import torch

from stare import (
    PRESETS,
    Controller,
    StareConfig,
    grpo_advantages,
    policy_loss,
    token_weights,
    token_weights_with_stats,
    top_count,
)

W32 = torch.tensor(1.1).item()


def test_p01_quantile_population_is_exactly_the_tensor_passed_in():
    # Row 0 has low surprisal, row 1 high. Over the whole tensor (global scope) the top-2 of 8 positive
    # tokens both come from row 1; called once per row (micro-batch scope) each row gets its own top-1.
    lp = -torch.tensor([[0.1, 0.2, 0.3, 0.4], [5.0, 6.0, 7.0, 8.0]])
    adv, mask = torch.ones(2), torch.ones(2, 4)
    whole = token_weights(lp, adv, mask, top_ratio=0.25)
    rows = [slice(0, 1), slice(1, 2)]
    split = torch.cat([token_weights(lp[r], adv[r], mask[r], top_ratio=0.25) for r in rows])
    assert whole.tolist() == [[1, 1, 1, 1], [1, 1, W32, W32]]
    assert split.tolist() == [[1, 1, 1, W32], [1, 1, 1, W32]]
    assert StareConfig().scope == "micro_batch" and StareConfig(scope="global_batch").scope == "global_batch"


def test_p02_gate_comes_from_the_controller_and_is_on_without_one():
    lp, adv, mask = -torch.rand(2, 8), torch.tensor([1.0, -1.0]), torch.ones(2, 8)
    assert Controller().gate_on is True                       # before any update: on
    default = token_weights(lp, adv, mask, top_ratio=0.5)     # no controller state: gate counts as on
    assert bool((default != 1).any())
    # the per-micro-batch entropy passed for logging never changes the weights
    high, _ = token_weights_with_stats(lp, adv, mask, top_ratio=0.5, entropy=9.0, target_entropy=0.3)
    assert torch.equal(high, default)


def test_p03_gate_is_strict_and_non_finite_entropy_keeps_the_previous_gate():
    ctl = Controller(target_entropy=0.3)
    ctl.update(0.3)
    assert ctl.gate_on is False                              # H == target: off
    ctl.update(0.29)
    assert ctl.gate_on is True
    with pytest.warns(RuntimeWarning, match="non-finite"):
        ctl.update(float("nan"))
    assert ctl.gate_on is True and ctl.entropy == 0.29


@pytest.mark.parametrize("count, ratio, k, ceil_k", [(100, 0.07, 7, 8), (10, 0.30000001, 3, 4)])
def test_p04_k_rounding_differs_from_ceil_where_the_reference_does(count, ratio, k, ceil_k):
    assert math.ceil(count * ratio) == ceil_k
    assert top_count(count, ratio) == k
    lp = -torch.rand(1, count)
    assert int((token_weights(lp, torch.ones(1), torch.ones(1, count), top_ratio=ratio) != 1).sum()) == k


def test_p05_exactly_k_tokens_even_when_surprisals_tie():
    lp = torch.full((1, 20), -1.0)                            # every surprisal ties
    weights = token_weights(lp, torch.ones(1), torch.ones(1, 20), top_ratio=0.1)
    assert int((weights != 1).sum()) == 2                     # which two is implementation-defined


def test_p06_sign_subsets_are_separate_and_zero_or_masked_tokens_never_candidates():
    # positives: surprisal 1..4; negatives 10..13 (all larger); zero-adv and masked tokens larger still
    lp = -torch.tensor([[1.0, 2.0, 3.0, 4.0, 10.0, 11.0, 12.0, 13.0, 99.0, 98.0]])
    adv = torch.tensor([[1.0] * 4 + [-1.0] * 4 + [0.0, 1.0]])
    mask = torch.tensor([[1] * 9 + [0]])
    weights = token_weights(lp, adv, mask, variant="C2", top_ratio=0.25)
    # each subset gets its own top-1 (k = 1 of 4), not the top-2 of the union
    assert weights[0].tolist() == [1, 1, 1, W32, 1, 1, 1, torch.tensor(0.9).item(), 1, 1]


def test_p07_o1_never_builds_negative_set_and_c2_damps_only_negatives():
    lp, adv, mask = -torch.rand(2, 10), torch.tensor([1.0, -1.0]), torch.ones(2, 10)
    _, o1 = token_weights_with_stats(lp, adv, mask, variant="o1", top_ratio=0.3)
    w_c2, c2 = token_weights_with_stats(lp, adv, mask, variant="c2", top_ratio=0.3)
    assert o1["stare/negative_reweight_ratio"].item() == 0.0
    assert c2["stare/negative_reweight_ratio"].item() == pytest.approx(0.15)
    assert bool((w_c2[0] >= 1).all()) and bool((w_c2[1] <= 1).all())


def test_p08_surprisal_is_minus_the_current_log_prob_detached():
    current = (-torch.tensor([[0.5, 3.0, 1.0]])).requires_grad_()
    weights = token_weights(current, torch.ones(1), torch.ones(1, 3), top_ratio=0.3)
    assert weights.tolist() == [[1, W32, 1]] and weights.grad_fn is None


def test_p09_weight_scales_the_dual_clipped_loss_and_clip_metrics_ignore_it():
    # clip_low 0.2, clip_high 0.28, c = 3, ω = [1.1, 0.5]
    # token 0: A = +1, r = e^1 ≈ 2.718: l1 = -2.718, l2 = -1.28, lclip = -1.28 (clipped) → ω·l = -1.408
    # token 1: A = -1, r = 5:         l1 = 5, l2 = 1.28, lclip = 5, l3 = 3 → dual clip 3 → ω·l = 1.5
    # token-mean: (-1.408 + 1.5) / 2 = 0.046
    # (For ω > 0, max/min commute with the scaling, so ω·l equals the loss with A' = ω·A; the metrics
    # are what the order changes: they are measured before weighting.)
    lp = torch.tensor([[1.0, math.log(5.0)]], requires_grad=True)
    old, adv, mask = torch.zeros(1, 2), torch.tensor([[1.0, -1.0]]), torch.ones(1, 2)
    loss, metrics = policy_loss(lp, old, adv, mask, clip_c=3.0, weights=torch.tensor([[1.1, 0.5]]))
    assert loss.item() == pytest.approx((-1.28 * 1.1 + 3.0 * 0.5) / 2, abs=1e-6)
    _, plain = policy_loss(lp, old, adv, mask, clip_c=3.0)
    for key in ("actor/pg_clipfrac", "actor/pg_clipfrac_lower", "actor/ppo_kl"):
        assert metrics[key].item() == plain[key].item()
    assert metrics["actor/pg_clipfrac"].item() == 0.5 and metrics["actor/pg_clipfrac_lower"].item() == 0.5


def test_p10_controller_state_overrides_config_and_adapts_while_gate_is_off():
    cfg = PRESETS["stare-o1"].stare.replace(adaptive=True, alpha=0.1)
    ctl = Controller(cfg.target_entropy, cfg.w, cfg.m, adaptive=True, alpha=0.1)
    ctl.update(0.5)                                            # above target: gate off, W/M relax toward 1
    assert ctl.gate_on is False and ctl.w == pytest.approx(1.0) and ctl.m == pytest.approx(1.0)
    ctl.update(0.1)
    ctl.update(0.1)
    assert ctl.w == pytest.approx(1.2) and cfg.w == 1.1        # the live W is the controller's
    lp, adv, mask = -torch.rand(1, 10), torch.ones(1), torch.ones(1, 10)
    weights = token_weights(lp, adv, mask, w=ctl.w, m=ctl.m, gate_on=ctl.gate_on)
    assert weights.max().item() == pytest.approx(1.2)


def test_p11_gate_off_still_reports_selection_sizes_with_mean_weight_one():
    lp, adv, mask = -torch.rand(2, 10), torch.tensor([1.0, -1.0]), torch.ones(2, 10)
    weights, stats = token_weights_with_stats(lp, adv, mask, variant="C2", top_ratio=0.2, gate_on=False)
    assert torch.equal(weights, torch.ones(2, 10))
    assert stats["stare/positive_reweight_ratio"].item() == pytest.approx(0.1)
    assert stats["stare/negative_reweight_ratio"].item() == pytest.approx(0.1)
    assert stats["stare/mean_weight"].item() == 1.0 and stats["stare/gate_on"].item() == 0.0


def test_p12_stare_and_grpo_ds_presets_have_no_overlong_shaping_and_reward_scale_does_not_matter():
    for name in ("grpo-ds", "stare-o1", "stare-c2"):
        assert PRESETS[name].overlong_buffer == 0 and not PRESETS[name].mask_truncated
    ids = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    acc = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0])
    # {0, 1} and ±1 rewards give the same std-normalised advantages (up to eps)
    signed = grpo_advantages(2 * acc - 1, ids)
    torch.testing.assert_close(grpo_advantages(acc, ids), signed, atol=1e-5, rtol=0)


def test_p13_on_policy_ratio_is_one_so_clipping_is_inert():
    lp = (-torch.rand(3, 7)).requires_grad_()
    adv, mask = torch.tensor([1.0, -2.0, 0.5]), torch.ones(3, 7)
    loss, metrics = policy_loss(lp, lp.detach(), adv, mask, clip_low=0.0, clip_high=0.0, clip_c=1.0001)
    assert loss.item() == pytest.approx(-(adv.sum() * 7 / 21).item(), abs=1e-6)
    assert metrics["actor/pg_clipfrac"].item() == 0 and metrics["actor/pg_clipfrac_lower"].item() == 0


def test_p14_masked_tool_tokens_get_no_loss_no_gradient_and_no_selection():
    lp = (-torch.rand(1, 6) * 5).requires_grad_()
    mask = torch.tensor([[1, 1, 0, 0, 1, 1]])                 # positions 2-3: tool output
    adv = torch.ones(1)
    weights = token_weights(lp, adv, mask, top_ratio=1.0)
    loss, _ = policy_loss(lp, lp.detach(), adv, mask, weights=weights)
    loss.backward()
    assert weights[0, 2:4].tolist() == [1, 1] and lp.grad[0, 2:4].tolist() == [0.0, 0.0]
    assert bool((lp.grad[0, [0, 1, 4, 5]] != 0).all())


def test_p15_weights_are_float32_so_w_is_stored_as_1_100000023841858():
    lp16 = (-torch.rand(1, 4)).half()
    weights = token_weights(lp16, torch.ones(1, dtype=torch.float32), torch.ones(1, 4), top_ratio=0.25)
    assert weights.dtype == torch.float32 and weights.max().item() == 1.100000023841858


# Pitfall 16 (validation sampling top_p 0.7, n 32) concerns evaluation sampling, not stare/; it is
# covered by training's evaluation settings.

"""Hand-computed checks of GSPO, CISPO, Clip-Cov, KL-Cov, Dr. GRPO, forking tokens and the adaptive bonus."""

import math

import pytest
import torch

from stare import (
    EntropyCoefController,
    aggregate,
    algo_policy_loss,
    cispo_surrogate,
    clip_cov_surrogate,
    forking_token_mask,
    get_preset,
    gspo_surrogate,
    kl_cov_surrogate,
    policy_loss,
    token_covariance,
)


def _leaf(values):
    return torch.tensor(values, dtype=torch.float32, requires_grad=True)


def test_gspo_shares_one_length_normalised_ratio_per_sequence_and_clips_whole_sequences():
    old = torch.zeros(2, 3)
    logp = _leaf([[0.1, 0.3, 9.0], [0.5, 0.5, 0.5]])            # row 0: Δ mean over 2 valid = 0.2
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    loss_mat, metrics = gspo_surrogate(logp, old, torch.tensor([1.0, 1.0]), mask, clip_low=0.2,
                                       clip_high=0.28)
    s0 = math.exp(0.2)                                            # 1.2214 < 1.28: not clipped
    assert loss_mat[0, :2].tolist() == pytest.approx([-s0, -s0], rel=1e-6)
    assert loss_mat[1].tolist() == pytest.approx([-1.28] * 3, rel=1e-6)   # exp(0.5) = 1.65 clipped at 1.28
    assert metrics["actor/pg_clipfrac"].item() == pytest.approx(3 / 5)
    aggregate(loss_mat, mask, "seq-mean-token-mean").backward()
    # d/dlogp_0t of mean_i mean_t(-A·s_it) = -(1/2)(1/2)·s0 on row 0; the clipped row gets no gradient.
    assert logp.grad[0].tolist() == pytest.approx([-s0 / 4, -s0 / 4, 0.0], rel=1e-6)
    assert logp.grad[1].tolist() == [0.0, 0.0, 0.0]


def test_cispo_weights_log_probs_by_the_clipped_detached_ratio():
    logp = _leaf([[-1.0, -2.0, -0.5]])
    old = logp.detach() - torch.tensor([[math.log(0.5), 0.0, math.log(6.0)]])   # ratios 0.5, 1, 6
    mask = torch.ones(1, 3)
    loss_mat, metrics = cispo_surrogate(logp, old, torch.tensor([1.0]), mask, clip_low=1.0, clip_high=4.0)
    assert loss_mat.tolist()[0] == pytest.approx([-0.5 * -1.0, -1.0 * -2.0, -5.0 * -0.5], rel=1e-6)
    loss_mat.sum().backward()
    assert logp.grad.tolist()[0] == pytest.approx([-0.5, -1.0, -5.0], rel=1e-6)   # no token loses it
    assert metrics["actor/pg_clipfrac"].item() == pytest.approx(1 / 3)
    low, _ = cispo_surrogate(logp, old, torch.tensor([1.0]), mask, clip_low=0.2, clip_high=4.0)
    assert low[0, 0].item() == pytest.approx(-0.8 * -1.0)        # lower bound 1 - 0.2 applies


def _cov_case():
    # A = (2, -2); logp rows (0, -4): means 0 and -2, so cov = [[4, -4], [-4, 4]].
    return _leaf([[0.0, -4.0], [0.0, -4.0]]), torch.tensor([2.0, -2.0]), torch.ones(2, 2)


def test_token_covariance_by_hand():
    logp, adv, mask = _cov_case()
    assert token_covariance(logp, adv, mask).tolist() == [[4.0, -4.0], [-4.0, 4.0]]


def test_clip_cov_detaches_candidates_inside_the_bounds_and_skips_already_clipped_tokens():
    logp, adv, mask = _cov_case()
    loss_mat, metrics = clip_cov_surrogate(logp, logp.detach(), adv, mask, cov_ratio=0.5)
    assert loss_mat.tolist() == [[0.0, -2.0], [2.0, 0.0]]          # k = 2 = |C|: both cov-4 tokens cut
    loss_mat.sum().backward()
    assert logp.grad.tolist() == [[0.0, -2.0], [2.0, 0.0]]
    assert metrics["actor/cov_selected_frac"].item() == 0.5
    none, _ = clip_cov_surrogate(logp, logp.detach(), adv, mask, cov_ratio=0.5, cov_ub=3.0)
    assert none.tolist() == [[-2.0, -2.0], [2.0, 2.0]]            # 4 is not < 3: no candidate
    old = logp.detach().clone()
    old[0, 0] -= math.log(2.0)                                    # ratio 2 at (0, 0), A > 0: clipped already
    clipped, _ = clip_cov_surrogate(logp, old, adv, mask, cov_ratio=0.5)
    assert clipped[0, 0].item() == pytest.approx(-2 * 1.2) and clipped[1, 1].item() == 0.0


def test_clip_cov_draws_k_of_the_candidates_reproducibly():
    logp, adv, mask = _cov_case()
    picks = set()
    for seed in range(20):
        loss_mat, _ = clip_cov_surrogate(logp, logp.detach(), adv, mask, cov_ratio=0.25,
                                         generator=torch.Generator().manual_seed(seed))
        cut = (loss_mat == 0).nonzero().tolist()
        assert len(cut) == 1 and cut[0] in ([0, 0], [1, 1])
        again, _ = clip_cov_surrogate(logp, logp.detach(), adv, mask, cov_ratio=0.25,
                                      generator=torch.Generator().manual_seed(seed))
        assert torch.equal(loss_mat, again)
        picks.add(tuple(cut[0]))
    assert picks == {(0, 0), (1, 1)}                              # uniform draw, not a fixed choice


def test_kl_cov_penalises_the_top_covariance_token_and_never_clips():
    logp = _leaf([[0.0, -4.0], [-1.0, -3.0]])                     # cov = [[4, -4], [-2, 2]]
    old = logp.detach().clone()
    old[0, 0] = -0.5                                              # Δ = 0.5 there: ratio e^0.5 = 1.65
    loss_mat, metrics = kl_cov_surrogate(logp, old, torch.tensor([2.0, -2.0]), torch.ones(2, 2),
                                         cov_ratio=0.25, kl_coef=1.0)
    r = math.exp(0.5)
    assert loss_mat.flatten().tolist() == pytest.approx([-2 * r + 0.5, -2.0, 2.0, 2.0], rel=1e-6)
    loss_mat.sum().backward()
    assert logp.grad.flatten().tolist() == pytest.approx([-2 * r + 1.0, -2.0, 2.0, 2.0], rel=1e-6)
    assert metrics["actor/cov_selected_frac"].item() == 0.25


def test_dr_grpo_reduction_divides_by_rows_times_a_constant_length():
    loss_mat, mask = torch.ones(2, 3), torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert aggregate(loss_mat, mask, "seq-mean-token-sum-norm").item() == pytest.approx(3 / (2 * 3))
    assert aggregate(loss_mat, mask, "seq-mean-token-sum-norm", norm_length=10).item() == pytest.approx(0.15)
    assert aggregate(loss_mat, mask, "seq-mean-token-sum-norm", num_seqs=4,
                     norm_length=10).item() == pytest.approx(3 / 40)
    with pytest.raises(ValueError, match="norm_length must be > 0"):
        aggregate(loss_mat, mask, "seq-mean-token-sum-norm", norm_length=0)


def test_forking_mask_keeps_tokens_at_or_above_the_interpolated_quantile():
    entropy = torch.tensor([[0.1, 0.5, 0.9, 0.3], [0.7, 0.2, 5.0, 0.4]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 1]])
    # 7 valid values; rank 0.8·6 = 4.8 → τ = 0.5 + 0.8·(0.7 - 0.5) = 0.66: keeps 0.7 and 0.9, not masked 5.
    assert forking_token_mask(entropy, mask, 0.2).tolist() == [[False, False, True, False],
                                                               [True, False, False, False]]
    assert forking_token_mask(entropy, mask, 1.0).tolist() == mask.bool().tolist()
    assert forking_token_mask(entropy, mask, 0.0).sum().item() == 1          # ρ = 0: the maximum only
    ties = forking_token_mask(torch.full((2, 4), 0.3), mask, 0.2)
    assert ties.tolist() == mask.bool().tolist()                 # every tie at τ is kept
    assert not forking_token_mask(entropy, torch.zeros(2, 4), 0.2).any()
    with pytest.raises(ValueError, match="top_ratio must lie in"):
        forking_token_mask(entropy, mask, 1.5)


def test_entropy_controller_steps_toward_the_target_and_applies_only_at_or_below_it():
    ctl = EntropyCoefController(0.0, 0.3, delta=0.1, coef_min=0.0, coef_max=0.25)
    assert ctl.applied == 0.0                                     # entropy starts at +inf
    seen = []
    for value in (0.2, 0.3, 0.25, 0.5, 0.9):
        ctl.update(value)
        seen.append((round(ctl.coef, 6), round(ctl.applied, 6)))
    assert seen == [(0.1, 0.1), (0.2, 0.2), (0.25, 0.25), (0.15, 0.0), (0.05, 0.0)]
    with pytest.warns(RuntimeWarning, match="non-finite"):
        ctl.update(float("nan"))
    assert (ctl.coef, ctl.entropy) == (pytest.approx(0.05), 0.9)
    other = EntropyCoefController()
    other.load_state_dict(ctl.state_dict())
    assert other.state_dict() == ctl.state_dict()
    with pytest.raises(KeyError, match="missing"):
        other.load_state_dict({"coef": 1.0})


def test_algo_policy_loss_matches_policy_loss_for_vanilla_and_routes_every_preset():
    torch.manual_seed(0)
    old = -torch.rand(4, 6) * 2
    logp = (old + 0.05 * torch.randn(4, 6)).requires_grad_(True)
    adv, mask, ent = torch.tensor([1.0, -1.0, 0.5, 0.0]), torch.ones(4, 6), torch.rand(4, 6)
    omega = torch.full((4, 6), 1.1)
    ours, _ = algo_policy_loss(get_preset("grpo-ds"), logp, old, adv, mask, weights=omega)
    ref, _ = policy_loss(logp, old, adv, mask, clip_c=10.0, weights=omega)
    assert ours.item() == pytest.approx(ref.item(), rel=1e-6)
    for name in ("dr-grpo", "gspo", "cispo", "clip-cov", "kl-cov", "adaptive-entropy", "forking-tokens"):
        loss, metrics = algo_policy_loss(get_preset(name), logp, old, adv, mask, entropy=ent)
        (grad,) = torch.autograd.grad(loss, logp)
        assert torch.isfinite(grad).all() and grad.abs().sum() > 0, name
    _, metrics = algo_policy_loss(get_preset("forking-tokens"), logp, old, adv, mask, entropy=ent)
    assert metrics["actor/forking_token_frac"].item() == pytest.approx(5 / 24)   # rank 0.8·23 = 18.4 → top 5
    with pytest.raises(ValueError, match="needs the per-token entropy"):
        algo_policy_loss(get_preset("forking-tokens"), logp, old, adv, mask)

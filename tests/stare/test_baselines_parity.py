"""Numerical parity of the baseline losses with TRL's GRPOTrainer and with verl's `core_algos`.

TRL (1.16, installed): the `trl_loss` fixture runs TRL's own `GRPOTrainer._compute_loss` on our tensors
(see conftest.py), so these tests compare against TRL's code, not a copy of it.

verl is not installable here (it pulls ray, vllm and more), so its functions are re-derived below from
`verl/trainer/ppo/core_algos.py` at commit b178a3cd56f58b2d502255daba591e92833930a7 (v0.7.0-125,
2026-01-29): `agg_loss`, `compute_policy_loss_gspo`, `compute_policy_loss_cispo`,
`compute_policy_loss_clip_cov`, `compute_policy_loss_kl_cov`, written out as formulas in our own code.
"""

import math

import pytest
import torch

from stare import (
    EntropyCoefController,
    aggregate,
    cispo_surrogate,
    clip_cov_surrogate,
    clipped_surrogate,
    forking_token_mask,
    gspo_surrogate,
    kl_cov_surrogate,
)


def _batch(seed=0, batch=6, length=9, spread=0.3):
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(batch, length, generator=gen) * 3
    logp = old + spread * torch.randn(batch, length, generator=gen)
    lengths = torch.randint(2, length + 1, (batch,), generator=gen)
    mask = (torch.arange(length)[None] < lengths[:, None]).float()
    adv = torch.randn(batch, generator=gen)
    return logp, old, adv, mask


def _grad(loss, leaf):
    return torch.autograd.grad(loss, leaf)[0]


# ---- TRL -------------------------------------------------------------------------------------------------


def test_dr_grpo_matches_trl(trl_loss):
    logp, old, adv, mask = _batch(spread=0.2)
    leaf = logp.clone().requires_grad_(True)
    trl, _ = trl_loss(leaf, old, adv[:, None], mask, loss_type="dr_grpo", max_completion_length=16)
    loss_mat, _ = clipped_surrogate(leaf, old, adv, mask, clip_low=0.2, clip_high=0.28, clip_c=1e9)
    ours = aggregate(loss_mat, mask, "seq-mean-token-sum-norm", norm_length=16)
    assert ours.item() == pytest.approx(trl.item(), rel=1e-6)
    torch.testing.assert_close(_grad(ours, leaf), _grad(trl, leaf))


def test_gspo_matches_trl_sequence_level_importance_sampling(trl_loss):
    logp, old, adv, mask = _batch(spread=5e-4)                    # around the 3e-4 / 4e-4 clip range
    leaf = logp.clone().requires_grad_(True)
    trl, _ = trl_loss(leaf, old, adv[:, None], mask, loss_type="grpo", level="sequence", eps_low=3e-4,
                      eps_high=4e-4)
    loss_mat, metrics = gspo_surrogate(leaf, old, adv, mask, clip_low=3e-4, clip_high=4e-4)
    ours = aggregate(loss_mat, mask, "seq-mean-token-mean")
    assert 0 < metrics["actor/pg_clipfrac"].item() < 1             # some sequences clipped, some not
    assert ours.item() == pytest.approx(trl.item(), rel=1e-5)
    torch.testing.assert_close(_grad(ours, leaf), _grad(trl, leaf))


def test_cispo_matches_trl_with_its_absolute_epsilon_max(trl_loss):
    logp, old, adv, mask = _batch(spread=1.5)                     # ratios well past 5: the cap is exercised
    leaf = logp.clone().requires_grad_(True)
    trl, _ = trl_loss(leaf, old, adv[:, None], mask, loss_type="cispo", eps_high=5.0)
    loss_mat, metrics = cispo_surrogate(leaf, old, adv, mask, clip_low=1.0, clip_high=4.0)
    ours = aggregate(loss_mat, mask, "token-mean")
    assert metrics["actor/pg_clipfrac"].item() > 0
    assert ours.item() == pytest.approx(trl.item(), rel=1e-6)
    torch.testing.assert_close(_grad(ours, leaf), _grad(trl, leaf))


@pytest.mark.parametrize("decimals", [None, 1])                  # continuous values, then many ties
def test_forking_tokens_match_trl_high_entropy_mask_and_loss(trl_loss, decimals):
    logp, old, adv, mask = _batch(seed=3, batch=8, length=33, spread=0.1)
    entropy = torch.rand(8, 33, generator=torch.Generator().manual_seed(4)) * 3
    entropy = entropy if decimals is None else entropy.round(decimals=decimals)
    leaf = logp.clone().requires_grad_(True)
    trl, trainer = trl_loss(leaf, old, adv[:, None], mask, loss_type="dapo", entropies=entropy,
                            top_entropy_quantile=0.2)
    ours_mask = forking_token_mask(entropy, mask, 0.2)
    assert torch.equal(ours_mask, trainer.get_high_entropy_mask(entropy, mask, 1 - 0.2))
    loss_mat, _ = clipped_surrogate(leaf, old, adv, mask, clip_c=1e9)
    ours = aggregate(loss_mat * ours_mask, mask, "token-mean")
    assert ours.item() == pytest.approx(trl.item(), rel=1e-6)
    torch.testing.assert_close(_grad(ours, leaf), _grad(trl, leaf))


def test_adaptive_entropy_controller_follows_trl_step_by_step(trl_loss):
    logp, old, adv, mask = _batch(seed=5)
    settings = {"entropy_target": 0.25, "entropy_coef_delta": 0.01, "entropy_coef_min": 0.0,
                "entropy_coef_max": 0.025}
    ctl = EntropyCoefController(0.005, 0.25, delta=0.01, coef_min=0.0, coef_max=0.025)
    trainer = None
    # Levels exact in float32, so "equal to the target" (0.25, an increase) really is equal in both.
    for level in (0.125, 0.25, 0.0625, 0.25, 0.5, 0.75, 0.375, 0.125):
        entropy = torch.full_like(logp, level)
        applied = ctl.applied                                     # the weight this step uses
        loss, trainer = trl_loss(logp, old, adv[:, None], mask, loss_type="dapo", entropies=entropy,
                                 entropy_coef=0.005, adaptive=True, entropy_args=settings, trainer=trainer)
        loss_mat, _ = clipped_surrogate(logp, old, adv, mask, clip_c=1e9)
        policy = aggregate(loss_mat, mask, "token-mean")
        assert loss.item() == pytest.approx(policy.item() - applied * level, abs=1e-6)
        ctl.update(level)                                         # TRL measures after the loss; so do we here
        assert ctl.coef == pytest.approx(trainer.entropy_coef, abs=1e-12)
        assert ctl.entropy == pytest.approx(trainer._last_world_entropy, rel=1e-6)


# ---- verl core_algos (b178a3cd), re-derived ----------------------------------------------------------------


def _verl_masked_mean(x, m):
    return (torch.where(m.bool(), x, 0.0) * m).sum() / (m.sum() + 1e-8)


def _verl_token_mean(loss_mat, m):
    return (loss_mat * m).sum() / m.sum()


def test_dr_grpo_matches_verl_seq_mean_token_sum_norm_times_the_micro_batch_share():
    # agg_loss("seq-mean-token-sum-norm", loss_scale_factor=L) = Σ_i Σ_t l·m / L; dp_actor then scales by
    # (micro-batch rows / mini-batch size), i.e. 1 / B for a single micro-batch.
    loss_mat, mask = torch.randn(5, 7), (torch.rand(5, 7) > 0.3).float()
    verl = (loss_mat * mask).sum(-1).sum() / 12 * (5 / 5) / 5
    ours = aggregate(loss_mat, mask, "seq-mean-token-sum-norm", norm_length=12)
    assert ours.item() == pytest.approx(verl.item())


def test_gspo_matches_verl():
    logp, old, adv, mask = _batch(seed=1, spread=5e-4)
    leaf = logp.clone().requires_grad_(True)
    advt = adv[:, None] * mask
    seq = ((leaf - old) * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    ratio = torch.clamp(leaf - leaf.detach() + seq.detach()[:, None], max=10.0).exp()
    verl_mat = torch.maximum(-advt * ratio, -advt * ratio.clamp(1 - 3e-4, 1 + 4e-4))
    verl = ((verl_mat * mask).sum(-1) / (mask.sum(-1) + 1e-8)).sum() / (mask.sum(-1) > 0).sum()
    loss_mat, _ = gspo_surrogate(leaf, old, advt, mask, clip_low=3e-4, clip_high=4e-4)
    ours = aggregate(loss_mat, mask, "seq-mean-token-mean")
    assert ours.item() == pytest.approx(verl.item(), rel=1e-5)
    torch.testing.assert_close(_grad(ours, leaf), _grad(verl, leaf))


def test_cispo_matches_verl_two_sided_clip():
    logp, old, adv, mask = _batch(seed=2, spread=0.6)
    leaf = logp.clone().requires_grad_(True)
    advt = adv[:, None] * mask
    ratio = (leaf - old).clamp(-20, 20).exp()
    verl = _verl_token_mean(-ratio.clamp(1 - 0.2, 1 + 0.28).detach() * advt * leaf, mask)
    loss_mat, _ = cispo_surrogate(leaf, old, advt, mask, clip_low=0.2, clip_high=0.28)
    ours = aggregate(loss_mat, mask, "token-mean")
    assert ours.item() == pytest.approx(verl.item(), rel=1e-6)
    torch.testing.assert_close(_grad(ours, leaf), _grad(verl, leaf))


def test_clip_cov_matches_verl_when_every_candidate_is_cut():
    logp, old, adv, mask = _batch(seed=6, batch=16, length=40, spread=0.4)
    leaf = logp.clone().requires_grad_(True)
    advt = (adv * 3)[:, None] * mask                              # covariances reach the (1, 5) window
    ratio = (leaf - old).exp()
    l1, l2 = -advt * ratio, -advt * ratio.clamp(0.8, 1.2)
    cov = (advt - _verl_masked_mean(advt, mask)) * (leaf.detach() - _verl_masked_mean(leaf.detach(), mask))
    cand = (cov > 1.0) & (cov < 5.0) & (mask > 0) & ~(l2 > l1)
    k = max(int(0.2 * mask.sum().item()), 1)
    assert 0 < cand.sum() <= k                                    # then verl's random draw takes them all
    verl = _verl_token_mean(torch.maximum(l1, l2) * (~cand).float(), mask)
    loss_mat, _ = clip_cov_surrogate(leaf, old, advt, mask, clip_low=0.2, clip_high=0.2, cov_ratio=0.2)
    ours = aggregate(loss_mat, mask, "token-mean")
    assert ours.item() == pytest.approx(verl.item(), rel=1e-6)
    torch.testing.assert_close(_grad(ours, leaf), _grad(verl, leaf))


@pytest.mark.parametrize("ratio", [2e-4, 0.05])
def test_kl_cov_matches_verl(ratio):
    logp, old, adv, mask = _batch(seed=7, batch=16, length=64, spread=0.3)
    leaf = logp.clone().requires_grad_(True)
    advt = adv[:, None] * mask
    valid = mask > 0
    a, lp = advt[valid], leaf.detach()[valid]
    cov = (a - a.mean()) * (lp - lp.mean())
    top = valid.nonzero()[cov.topk(max(1, int(len(cov) * ratio))).indices]
    delta = leaf - old
    verl_mat = -advt * delta.exp()
    penalised = verl_mat + 1.0 * delta.abs()
    chosen = torch.zeros_like(valid)
    chosen[top[:, 0], top[:, 1]] = True
    verl = _verl_token_mean(torch.where(chosen, penalised, verl_mat), mask)
    loss_mat, _ = kl_cov_surrogate(leaf, old, advt, mask, cov_ratio=ratio, kl_coef=1.0)
    ours = aggregate(loss_mat, mask, "token-mean")
    assert ours.item() == pytest.approx(verl.item(), rel=1e-6)
    torch.testing.assert_close(_grad(ours, leaf), _grad(verl, leaf))
    assert math.isfinite(ours.item())

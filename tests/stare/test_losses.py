"""policy_loss, aggregate and the log-prob helpers, with every intermediate written by hand."""

import math

import pytest
import torch

from stare import aggregate, entropy_bonus, kl_penalty, policy_loss, token_logprobs_and_entropy, token_weights

LN = math.log


def _case():
    # ratios r = [1.5, 0.5, 0.5, 5.0]; advantages per token [+1, +1, -1, -1]
    f64 = torch.float64
    lp = torch.tensor([[LN(1.5), LN(0.5), LN(0.5), LN(5.0)]], dtype=f64, requires_grad=True)
    return lp, torch.zeros(1, 4, dtype=f64), torch.tensor([[1.0, 1.0, -1.0, -1.0]], dtype=f64)


def test_dual_clip_hand_numbers():
    lp, old, adv = _case()
    mask = torch.ones(1, 4)
    loss, metrics = policy_loss(lp, old, adv, mask, clip_low=0.2, clip_high=0.28, clip_c=3.0)
    # l1    = -A·r              = [-1.5, -0.5,  0.5,  5.0]
    # l2    = -A·clip(r,.8,1.28) = [-1.28, -0.8, 0.8, 1.28]
    # lclip = max(l1, l2)       = [-1.28, -0.5, 0.8, 5.0]     clipped (l2 > l1): tokens 0 and 2
    # l3    = -A·c              = [-3, -3, 3, 3]
    # loss  = A<0 ? min(l3, lclip) : lclip = [-1.28, -0.5, 0.8, 3.0]   dual clip fires on token 3
    # token-mean = (−1.28 − 0.5 + 0.8 + 3.0) / 4 = 0.505
    assert loss.item() == pytest.approx(0.505)
    assert metrics["actor/pg_clipfrac"].item() == pytest.approx(0.5)
    assert metrics["actor/pg_clipfrac_lower"].item() == pytest.approx(0.25)
    # ppo_kl = mean(−log r) = −(0.405465 − 0.693147 − 0.693147 + 1.609438) / 4 = −0.157152
    assert metrics["actor/ppo_kl"].item() == pytest.approx(-0.157152, abs=1e-6)
    # gradient: only token 1 is unclipped: d(−A·r)/dlogp = −A·r = −0.5, divided by 4 tokens
    loss.backward()
    torch.testing.assert_close(lp.grad, torch.tensor([[0.0, -0.125, 0.0, 0.0]], dtype=torch.float64))


def test_weights_scale_each_token_after_clipping_hand_numbers():
    lp, old, adv = _case()
    weights = torch.tensor([[1.1, 1.0, 0.9, 1.0]], dtype=torch.float64)
    loss, _ = policy_loss(lp, old, adv, torch.ones(1, 4), clip_c=3.0, weights=weights)
    # (−1.28·1.1 − 0.5 + 0.8·0.9 + 3.0) / 4 = (−1.408 − 0.5 + 0.72 + 3.0) / 4 = 0.453
    assert loss.item() == pytest.approx(0.453)


def _random(seed=0, b=4, t=9):
    gen = torch.Generator().manual_seed(seed)
    lp = (-torch.rand(b, t, generator=gen, dtype=torch.float64) * 3).requires_grad_()
    old = lp.detach() + 0.3 * torch.randn(b, t, generator=gen, dtype=torch.float64)
    adv = torch.randn(b, generator=gen, dtype=torch.float64)
    mask = (torch.rand(b, t, generator=gen) > 0.25).long()
    return lp, old, adv, mask


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_unit_weights_and_gate_off_give_exactly_the_grpo_loss(agg):
    lp, old, adv, mask = _random()
    grpo, _ = policy_loss(lp, old, adv, mask, agg=agg)
    ones, _ = policy_loss(lp, old, adv, mask, agg=agg, weights=torch.ones_like(lp))
    gated = token_weights(lp, adv, mask, variant="C2", top_ratio=0.5, gate_on=False).double()
    off, _ = policy_loss(lp, old, adv, mask, agg=agg, weights=gated)
    assert torch.equal(grpo, ones) and torch.equal(grpo, off)


def test_every_token_keeps_its_gradient_sign():
    lp, old, adv, mask = _random(seed=3, b=6, t=20)
    weights = token_weights(lp, adv, mask, variant="C2", top_ratio=0.3, w=1.5, m=0.5).double()
    grads = []
    for wt in (None, weights):
        leaf = lp.detach().requires_grad_()
        policy_loss(leaf, old, adv, mask, weights=wt)[0].backward()
        grads.append(leaf.grad)
    assert torch.equal(torch.sign(grads[0]), torch.sign(grads[1]))
    assert bool((grads[1] != grads[0]).any())


def test_gradient_matches_finite_differences():
    lp, old, adv, mask = _random(seed=5, b=2, t=5)
    weights = token_weights(lp, adv, mask, variant="C2", top_ratio=0.5).double()
    for agg in ("token-mean", "seq-mean-token-mean"):
        def loss_of(x, agg=agg):
            return policy_loss(x, old, adv, mask, weights=weights, agg=agg)[0]
        assert torch.autograd.gradcheck(loss_of, (lp,), eps=1e-6, atol=1e-6)


def test_token_mean_over_micro_batches_with_global_count_equals_full_batch():
    lp, old, adv, mask = _random(seed=1, b=6, t=11)
    full, _ = policy_loss(lp, old, adv, mask)
    n = mask.sum()
    parts = [policy_loss(lp[s], old[s], adv[s], mask[s], num_tokens=n)[0] for s in (slice(0, 2), slice(2, 6))]
    torch.testing.assert_close(parts[0] + parts[1], full)
    seq_full, _ = policy_loss(lp, old, adv, mask, agg="seq-mean-token-sum")
    seqs = [policy_loss(lp[s], old[s], adv[s], mask[s], agg="seq-mean-token-sum", num_seqs=6)[0]
            for s in (slice(0, 3), slice(3, 6))]
    torch.testing.assert_close(seqs[0] + seqs[1], seq_full)


def test_aggregation_modes_hand_numbers():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [9.0, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]])      # third sequence empty
    assert aggregate(loss, mask, "token-mean").item() == pytest.approx(10 / 4)
    assert aggregate(loss, mask, "seq-mean-token-sum").item() == pytest.approx((6 + 4) / 2)
    assert aggregate(loss, mask, "seq-mean-token-mean").item() == pytest.approx((2 + 4) / 2)
    with pytest.raises(ValueError, match="token-mean"):
        aggregate(loss, mask, "sum")


def test_per_sequence_and_per_token_advantages_give_the_same_loss():
    lp, old, adv, mask = _random(seed=2)
    a, _ = policy_loss(lp, old, adv, mask)
    b, _ = policy_loss(lp, old, adv[:, None] * mask, mask)
    torch.testing.assert_close(a, b)


def test_bad_clip_c_and_agg_raise():
    lp, old, adv, mask = _random()
    with pytest.raises(ValueError, match="clip_c"):
        policy_loss(lp, old, adv, mask, clip_c=1.0)
    with pytest.raises(ValueError, match="agg must be one of"):
        policy_loss(lp, old, adv, mask, agg="mean")


def test_token_logprobs_and_entropy_match_log_softmax_and_chunking_is_invisible():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 11, generator=gen, requires_grad=True)
    ids = torch.randint(0, 11, (2, 5), generator=gen)
    logp, ent = token_logprobs_and_entropy(logits, ids, temperature=0.7, chunk_rows=3)
    ref = torch.log_softmax(logits / 0.7, -1)
    torch.testing.assert_close(logp, ref.gather(-1, ids[..., None]).squeeze(-1))
    torch.testing.assert_close(ent, -(ref.exp() * ref).sum(-1).detach())
    assert logp.requires_grad and not ent.requires_grad
    logp.sum().backward()
    assert logits.grad is not None


def test_kl_estimators_hand_numbers():
    lp, ref = torch.tensor([-1.0]), torch.tensor([-2.0])
    assert kl_penalty(lp, ref, "k1").item() == pytest.approx(1.0)
    # k3 = e^(−1) − (−1) − 1 = 0.367879
    assert kl_penalty(lp, ref, "k3").item() == pytest.approx(math.exp(-1), abs=1e-6)
    with pytest.raises(ValueError, match="k1"):
        kl_penalty(lp, ref, "k2")


def test_log_ratio_is_clamped_to_plus_minus_20_before_exp():
    lp = torch.tensor([[50.0, -50.0]], dtype=torch.float64)
    old = torch.zeros(1, 2, dtype=torch.float64)
    # A = −1 on both: token 0: r = e^20, lclip = e^20, dual clip → c = 10; token 1: r = e^−20, l2 = 0.8
    loss, metrics = policy_loss(lp, old, torch.tensor([-1.0, -1.0], dtype=torch.float64)[:1].expand(1),
                                torch.ones(1, 2))
    assert metrics["actor/ppo_kl"].item() == pytest.approx(0.0)           # mean(−20, +20)
    assert loss.item() == pytest.approx((10.0 + 0.8) / 2)
    _, one = policy_loss(lp[:, :1], old[:, :1], torch.tensor([1.0], dtype=torch.float64), torch.ones(1, 1))
    assert one["actor/ppo_kl"].item() == pytest.approx(-20.0)


def test_entropy_bonus_is_off_by_default_and_subtracts_the_mean_entropy():
    ent = torch.tensor([[0.5, 1.5, 9.0]], requires_grad=True)
    mask = torch.tensor([[1, 1, 0]])
    assert entropy_bonus(ent, mask).item() == 0.0
    bonus = entropy_bonus(ent, mask, coef=0.1)
    assert bonus.item() == pytest.approx(-0.1)                 # −0.1 · (0.5 + 1.5) / 2
    bonus.backward()
    assert ent.grad[0].tolist() == pytest.approx([-0.05, -0.05, 0.0])

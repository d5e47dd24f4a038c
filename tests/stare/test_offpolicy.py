"""Off-policy correction maths (stare/offpolicy.py): rollout/trainer mismatch and TIS, hand numbers."""

import math

import pytest
import torch

from stare.offpolicy import combine_weights, logprob_mismatch, tis_weights


def test_mismatch_is_computed_on_loss_mask_tokens_only():
    old = torch.tensor([[-1.0, -2.0, -0.5, -3.0]])
    rollout = torch.tensor([[-1.5, -1.5, -9.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0]])
    out = logprob_mismatch(old, rollout, mask)
    # Δ = [0.5, -0.5]; k3 = e^Δ - 1 - Δ = [0.148721, 0.106531]
    assert out["rollout/logprob_abs_diff"] == pytest.approx(0.5)
    assert out["rollout/kl"] == pytest.approx((math.exp(0.5) - 1.5 + math.exp(-0.5) - 0.5) / 2, abs=1e-9)
    assert logprob_mismatch(old, old, mask) == {"rollout/logprob_abs_diff": 0.0, "rollout/kl": 0.0}
    assert logprob_mismatch(old, rollout, torch.zeros_like(mask)) == {"rollout/logprob_abs_diff": 0.0,
                                                                       "rollout/kl": 0.0}


def test_mismatch_reduce_gives_the_global_means():
    old, rollout = torch.randn(4, 5, generator=torch.Generator().manual_seed(0)), torch.zeros(4, 5)
    mask = torch.tensor([[1, 1, 0, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [0, 0, 0, 0, 0]]).float()
    whole = logprob_mismatch(old, rollout, mask)

    def sums(rows):
        delta = (old[rows] - rollout[rows]).double() * mask[rows]
        return torch.stack([delta.abs().sum(), (torch.expm1(delta) - delta).sum(), mask[rows].double().sum()])
    # this "process" holds rows 0:2; reduce adds the sums of the other one (rows 2:4)
    halves = logprob_mismatch(old[:2], rollout[:2], mask[:2], reduce=lambda t: t + sums(slice(2, 4)))
    assert halves == pytest.approx(whole)


def test_tis_weights_truncate_the_ratio_at_the_cap():
    old = torch.tensor([[math.log(0.5), math.log(3.0), 0.0]])
    rollout = torch.zeros(1, 3)
    assert torch.allclose(tis_weights(old, rollout, cap=2.0), torch.tensor([[0.5, 2.0, 1.0]]))
    with pytest.raises(ValueError, match="tis_cap"):
        tis_weights(old, rollout, cap=0.0)
    omega = torch.tensor([[2.0, 1.0, 0.0]])
    assert combine_weights(None, None) is None
    assert combine_weights(omega, None) is omega
    assert torch.equal(combine_weights(None, omega), omega)
    combined = combine_weights(omega, tis_weights(old, rollout, 2.0))
    assert torch.allclose(combined, torch.tensor([[1.0, 2.0, 0.0]]))

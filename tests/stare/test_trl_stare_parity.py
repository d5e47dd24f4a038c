"""Parity with TRL's own STARE (`GRPOConfig(loss_type="stare")`, TRL pull request #6167), when installed.

Skipped while the installed TRL has no `stare_top_p_ratio` config field (TRL 1.16 has none). Runs TRL's
`_compute_loss` through the `trl_loss` stand-in (conftest.py) with the gate forced on (target entropy
1e9) on an on-policy batch, and compares with `token_weights` + `policy_loss` (token-mean over the
micro-batch, TRL's bnpo branch that the pull request uses). Candidate counts avoid multiples of 10,
where the pull request's `ceil(c·P)` and the authors' `int(c·P + 0.999999)` can differ.
"""

import dataclasses

import pytest
import torch

from stare import policy_loss, token_weights

trl = pytest.importorskip("trl")
UPSTREAM = {f.name for f in dataclasses.fields(trl.GRPOConfig)}
pytestmark = pytest.mark.skipif("stare_top_p_ratio" not in UPSTREAM,
                                reason="installed TRL has no loss_type='stare' (TRL pull request #6167)")


@pytest.mark.parametrize("variant", ["O1", "C2"])
def test_our_weights_and_loss_match_trl_loss_type_stare(trl_loss, variant):
    gen = torch.Generator().manual_seed(0)
    logp = -torch.rand(4, 9, generator=gen) * 4
    mask = (torch.arange(9)[None] < torch.tensor([7, 6, 9, 5])[:, None]).float()   # |T+| = 13, |T-| = 14
    adv = torch.tensor([1.0, 0.5, -1.0, -0.5])
    settings = {"stare_variant": variant, "stare_top_p_ratio": 0.1, "stare_reweight_w": 1.1,
                "stare_reweight_m": 0.9, "stare_target_entropy": 1e9}
    leaf = logp.clone().requires_grad_(True)
    theirs, _ = trl_loss(leaf, logp, adv[:, None], mask, loss_type="stare",
                         entropies=torch.full_like(logp, 0.5), entropy_args=settings, extra=settings)
    omega = token_weights(logp, adv, mask, variant=variant, top_ratio=0.1, w=1.1, m=0.9, gate_on=True)
    ours, _ = policy_loss(leaf, logp, adv, mask, weights=omega, agg="token-mean")
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-6)
    torch.testing.assert_close(torch.autograd.grad(ours, leaf)[0], torch.autograd.grad(theirs, leaf)[0])

"""The docs/stare.md recipe end to end on a toy policy: advantages, gate, ω, loss, backward."""

import torch

from stare import (
    Controller,
    get_preset,
    grpo_advantages,
    masked_mean,
    policy_loss,
    token_logprobs_and_entropy,
    token_weights_with_stats,
)


def test_docs_recipe_runs_and_micro_batches_sum_to_the_full_batch_loss():
    torch.manual_seed(0)
    cfg = get_preset("stare-c2")
    vocab, b, t = 7, 8, 6
    table = torch.nn.Parameter(torch.randn(vocab, vocab))       # toy policy: next-token logits table
    ids = torch.randint(0, vocab, (b, t))
    prev = torch.roll(ids, 1, dims=1)
    mask = (torch.rand(b, t) > 0.2).long()
    rewards = torch.tensor([1.0, 0, 0, 1, 1, 1, 0, 1])
    group_ids = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])

    adv = grpo_advantages(rewards, group_ids)
    with torch.no_grad():
        old_logp, entropy = token_logprobs_and_entropy(table[prev], ids)
    batch_entropy = masked_mean(entropy, mask).item()
    # target just above the batch entropy, so the gate is on for this check
    ctl = Controller(batch_entropy + 0.01, cfg.stare.w, cfg.stare.m)
    ctl.update(batch_entropy)
    assert ctl.gate_on

    logp, _ = token_logprobs_and_entropy(table[prev], ids)
    n_tokens = mask.sum()
    total = torch.zeros(())
    for rows in (slice(0, 4), slice(4, 8)):
        omega, stats = token_weights_with_stats(logp[rows], adv[rows], mask[rows], variant=cfg.stare.variant,
                                                top_ratio=0.3, w=ctl.w, m=ctl.m, gate_on=ctl.gate_on)
        loss, _ = policy_loss(logp[rows], old_logp[rows], adv[rows], mask[rows], weights=omega,
                              agg=cfg.loss_agg, num_tokens=n_tokens)
        loss.backward(retain_graph=True)
        total = total + loss.detach()
        assert stats["stare/gate_on"].item() == 1.0
    assert table.grad is not None and torch.isfinite(table.grad).all()
    # the same ω computed per micro-batch, applied in one full-batch loss, gives the same total
    omega_full = torch.cat([token_weights_with_stats(logp[r], adv[r], mask[r], variant="C2", top_ratio=0.3)[0]
                            for r in (slice(0, 4), slice(4, 8))])
    full, _ = policy_loss(logp, old_logp, adv, mask, weights=omega_full)
    torch.testing.assert_close(total, full.detach())

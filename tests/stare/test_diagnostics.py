"""Four-quadrant diagnostics: advantage sign × high/low surprisal."""

import pytest
import torch

from stare import quadrant_metrics, token_weights


def test_quadrant_hand_numbers():
    # surprisal [3, 1, 2, 0.5 | 4, 0.2 | 9]  advantages [+1 ×4 | −2 ×2 | 0]; P = 0.25
    # k+ = 1 → pos_high = {3}, pos_low = {1, 2, 0.5}; k- = 1 → neg_high = {4}, neg_low = {0.2}
    lp = -torch.tensor([[3.0, 1.0, 2.0, 0.5, 4.0, 0.2, 9.0]])
    adv = torch.tensor([[1.0] * 4 + [-2.0] * 2 + [0.0]])
    entropy = torch.tensor([[0.7, 0.1, 0.2, 0.3, 0.9, 0.05, 1.0]])
    metrics = quadrant_metrics(lp, adv, torch.ones(1, 7), entropy, top_ratio=0.25)
    got = {k: v.item() for k, v in metrics.items()}
    # token shares over 7 valid tokens (the zero-advantage token belongs to no quadrant)
    assert [got[f"quadrant/{q}/token_share"] for q in ("pos_high", "pos_low", "neg_high", "neg_low")] == \
        pytest.approx([1 / 7, 3 / 7, 1 / 7, 1 / 7])
    # |A| total = 4·1 + 2·2 = 8
    assert [got[f"quadrant/{q}/adv_share"] for q in ("pos_high", "pos_low", "neg_high", "neg_low")] == \
        pytest.approx([1 / 8, 3 / 8, 2 / 8, 2 / 8])
    assert [got[f"quadrant/{q}/entropy"] for q in ("pos_high", "pos_low", "neg_high", "neg_low")] == \
        pytest.approx([0.7, 0.2, 0.9, 0.05])


def test_weighted_advantage_share_uses_the_applied_weights():
    lp = -torch.tensor([[3.0, 1.0]])
    adv, mask, ent = torch.ones(1, 2), torch.ones(1, 2), torch.zeros(1, 2)
    weights = token_weights(lp, adv, mask, top_ratio=0.5, w=3.0)
    got = quadrant_metrics(lp, adv, mask, ent, top_ratio=0.5, weights=weights)
    assert got["quadrant/pos_high/adv_share"].item() == pytest.approx(0.75)


def test_empty_batch_gives_zeros_not_nan():
    got = quadrant_metrics(-torch.rand(1, 3), torch.zeros(1), torch.ones(1, 3), torch.rand(1, 3))
    assert all(v.item() == 0.0 for v in got.values()) and len(got) == 12

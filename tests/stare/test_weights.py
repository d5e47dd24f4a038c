"""token_weights / token_weights_with_stats: STARE_SPEC §1.2 and §1.5 with hand-computed cases."""

import pytest
import torch

from stare import token_weights, token_weights_with_stats, top_count
from stare._syncs import count_host_syncs

W32 = torch.tensor(1.1, dtype=torch.float32).item()   # 1.100000023841858
M32 = torch.tensor(0.9, dtype=torch.float32).item()


def _surprisal_row(values):
    return -torch.tensor([values], dtype=torch.float32)   # log_probs = -surprisal


def test_hand_computed_o1_and_c2_on_one_row():
    # surprisal  [0.1, 2.0, 0.5, 3.0 | 1.0, 4.0, 0.2, 0.3]  advantages +1 on the first four, -1 on the rest
    lp = _surprisal_row([0.1, 2.0, 0.5, 3.0, 1.0, 4.0, 0.2, 0.3])
    adv = torch.tensor([[1.0] * 4 + [-1.0] * 4])
    mask = torch.ones(1, 8)
    # P = 0.5: k+ = k- = min(4, max(1, int(2 + 0.999999))) = 2; L+ = {3.0, 2.0}, L- = {4.0, 1.0}
    o1 = token_weights(lp, adv, mask, variant="O1", top_ratio=0.5)
    c2 = token_weights(lp, adv, mask, variant="C2", top_ratio=0.5)
    assert o1.tolist() == [[1.0, W32, 1.0, W32, 1.0, 1.0, 1.0, 1.0]]
    assert c2.tolist() == [[1.0, W32, 1.0, W32, M32, M32, 1.0, 1.0]]


@pytest.mark.parametrize("variant", ["o1", "O1", "c2", "C2"])
def test_variant_is_case_insensitive(variant):
    lp, adv, mask = -torch.rand(2, 16), torch.tensor([1.0, -1.0]), torch.ones(2, 16)
    ref = token_weights(lp, adv, mask, variant=variant.upper(), top_ratio=0.3)
    assert torch.equal(token_weights(lp, adv, mask, variant=variant, top_ratio=0.3), ref)


@pytest.mark.parametrize("bad", ["O2", "", "c1", "both"])
def test_bad_variant_raises_naming_valid_values(bad):
    with pytest.raises(ValueError, match="O1.*C2"):
        token_weights(-torch.rand(1, 4), torch.ones(1), torch.ones(1, 4), variant=bad)


@pytest.mark.parametrize("ratio", [-0.01, 1.01, float("nan")])
def test_ratio_outside_unit_interval_raises(ratio):
    with pytest.raises(ValueError, match=r"top_ratio must lie in \[0, 1\]"):
        token_weights(-torch.rand(1, 4), torch.ones(1), torch.ones(1, 4), top_ratio=ratio)


@pytest.mark.parametrize("count, ratio, k", [(100, 0.07, 7), (7, 0.1, 1), (10, 0.30000001, 3), (0, 0.5, 0),
                                             (5, 0.0, 0), (5, 1.0, 5), (3, 0.99, 3), (20, 0.1, 2),
                                             (21, 0.1, 3), (3, 1e-7, 1)])
def test_k_follows_the_reference_formula(count, ratio, k):
    assert top_count(count, ratio) == k


@pytest.mark.parametrize("count, ratio, k", [(100, 0.07, 7), (7, 0.1, 1), (13, 0.25, 4)])
def test_exactly_k_tokens_per_subset_are_reweighted(count, ratio, k):
    lp = -torch.rand(1, count + 5)
    adv = torch.tensor([[1.0] * count + [0.0] * 5])
    weights = token_weights(lp, adv, torch.ones_like(lp), top_ratio=ratio)
    assert int((weights != 1).sum()) == k


def test_c2_reweights_negatives_o1_leaves_them_at_one():
    lp, mask = -torch.rand(4, 32), torch.ones(4, 32)
    adv = torch.tensor([1.0, -1.0, 2.0, -0.5])
    o1, c2 = (token_weights(lp, adv, mask, variant=v, top_ratio=0.2) for v in ("O1", "C2"))
    assert torch.equal(o1[adv > 0], c2[adv > 0])
    assert bool((o1[adv < 0] == 1).all()) and int((c2[adv < 0] == M32).sum()) == top_count(64, 0.2)


@pytest.mark.parametrize("surprisal", [50.0, 1e30, float("inf"), float("nan")])
def test_masked_token_is_never_selected_whatever_its_surprisal(surprisal):
    lp = -torch.rand(2, 10)
    lp[0, 3] = -surprisal
    lp[1, 9] = -surprisal
    mask = torch.ones(2, 10)
    mask[0, 3] = mask[1, 9] = 0
    adv = torch.tensor([[1.0] * 10, [-1.0] * 10])   # masked positions hold non-zero advantages
    weights = token_weights(lp, adv, mask, variant="C2", top_ratio=1.0)
    assert weights[0, 3] == 1 and weights[1, 9] == 1
    assert int((weights != 1).sum()) == 18


def test_weights_follow_advantage_dtype_and_carry_no_grad():
    lp = (-torch.rand(2, 6)).requires_grad_()
    weights = token_weights(lp, torch.tensor([1.0, -1.0]), torch.ones(2, 6), top_ratio=0.5)
    assert weights.dtype == torch.float32 and not weights.requires_grad
    assert weights.max().item() == W32


def test_per_sequence_and_per_token_advantages_give_the_same_weights():
    lp, mask = -torch.rand(3, 9), (torch.rand(3, 9) > 0.3).long()
    adv = torch.tensor([0.7, -1.2, 0.0])
    assert torch.equal(token_weights(lp, adv, mask, variant="C2", top_ratio=0.3),
                       token_weights(lp, adv[:, None] * mask, mask, variant="C2", top_ratio=0.3))


def test_stats_match_hand_counts():
    lp = _surprisal_row([0.1, 2.0, 0.5, 3.0, 1.0, 4.0, 0.2, 0.3, 9.0, 9.0])
    adv = torch.tensor([[1.0] * 4 + [-1.0] * 4 + [0.0, 5.0]])
    mask = torch.tensor([[1] * 9 + [0]])            # 9 valid; the last token is padding
    weights, stats = token_weights_with_stats(lp, adv, mask, variant="C2", top_ratio=0.5, w=1.3, m=0.9,
                                              entropy=0.2, target_entropy=0.3)
    got = {k: v.item() for k, v in stats.items()}
    assert got["stare/positive_candidate_ratio"] == pytest.approx(4 / 9)
    assert got["stare/negative_candidate_ratio"] == pytest.approx(4 / 9)
    assert got["stare/positive_reweight_ratio"] == pytest.approx(2 / 9)
    assert got["stare/negative_reweight_ratio"] == pytest.approx(2 / 9)
    assert got["stare/mean_weight"] == pytest.approx((5 + 2 * 1.3 + 2 * 0.9) / 9, abs=1e-6)
    assert got["stare/mean_weight"] == pytest.approx(((weights * mask).sum() / 9).item(), abs=1e-6)
    assert (got["stare/gate_on"], got["stare/variant_is_c2"], got["stare/top_ratio"]) == (1.0, 1.0, 0.5)
    assert got["stare/controller_entropy"] == pytest.approx(0.2)
    assert got["stare/positive_weight"] == pytest.approx(1.3)
    assert got["stare/negative_weight"] == pytest.approx(0.9)


def test_stats_and_weights_cost_at_most_one_host_sync():
    lp, mask = -torch.rand(8, 64), (torch.rand(8, 64) > 0.2).long()
    adv = torch.randn(8)
    for variant in ("O1", "C2"):
        with count_host_syncs() as log:
            token_weights_with_stats(lp, adv, mask, variant=variant)
        assert log.count == 1, log.ops
    with count_host_syncs() as log:
        token_weights(lp, adv, mask, gate_on=False)
    assert log.count == 0, log.ops


def test_policy_loss_needs_no_host_sync_and_diagnostics_one():
    from stare import policy_loss, quadrant_metrics

    lp, mask = (-torch.rand(4, 16)).requires_grad_(), torch.ones(4, 16)
    adv = torch.randn(4)
    with count_host_syncs() as log:
        loss, _ = policy_loss(lp, lp.detach(), adv, mask, num_tokens=64)
        loss.backward()
    assert log.count == 0, log.ops
    with count_host_syncs() as log:
        quadrant_metrics(lp, adv, mask, torch.rand(4, 16))
    assert log.count == 1, log.ops


def test_sync_counter_catches_the_reference_style_operations():
    x = torch.rand(8)
    with count_host_syncs() as log:
        x[x > 0.5].topk(1)
        float(x.sum().item())
        x.sum().tolist()
    assert log.count == 3, log.ops


def test_empty_and_all_masked_batches_give_ones_and_a_zero_mean_weight():
    lp = -torch.rand(2, 5)
    weights, stats = token_weights_with_stats(lp, torch.ones(2), torch.zeros(2, 5))
    assert torch.equal(weights, torch.ones(2, 5))
    # D10: the reference's mean_weight is Σ(ω·mask) / max(1, Σ mask) = 0 / 1 on an empty mask.
    assert stats["stare/mean_weight"].item() == 0.0 and stats["stare/positive_candidate_ratio"].item() == 0.0

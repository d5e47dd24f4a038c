"""grpo_advantages against a loop-based transcription of verl's compute_grpo_outcome_advantage."""

import pytest
import torch

from stare import grpo_advantages


def _verl_loop(rewards, ids, norm_std=True, eps=1e-6):
    out = torch.empty_like(rewards)
    for g in set(ids):
        members = [i for i, x in enumerate(ids) if x == g]
        vals = rewards[members]
        mean, std = (torch.tensor(0.0), torch.tensor(1.0)) if len(members) == 1 else (vals.mean(), vals.std())
        out[members] = (vals - mean) / (std + eps) if norm_std else vals - mean
    return out


def test_hand_computed_group_of_four_uses_unbiased_std():
    # rewards 1,0,0,0: mean 0.25, unbiased var = (0.5625 + 3·0.0625)/3 = 0.25, std 0.5
    adv = grpo_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), torch.tensor([7, 7, 7, 7]))
    expected = torch.tensor([0.75, -0.25, -0.25, -0.25]) / (0.5 + 1e-6)
    torch.testing.assert_close(adv, expected)


@pytest.mark.parametrize("norm_std", [True, False])
def test_matches_reference_loop_with_string_ids_and_singletons(norm_std):
    gen = torch.Generator().manual_seed(0)
    rewards = torch.rand(13, generator=gen)
    ids = ["a", "b", "a", "c", "b", "a", "d", "b", "b", "e", "e", "a", "c"]   # "d" is a singleton
    expected = _verl_loop(rewards, ids, norm_std)
    torch.testing.assert_close(grpo_advantages(rewards, ids, norm_std=norm_std), expected)


def test_singleton_group_keeps_its_raw_reward_like_the_reference():
    adv = grpo_advantages(torch.tensor([1.0, 0.0]), torch.tensor([0, 1]))
    torch.testing.assert_close(adv, torch.tensor([1.0, 0.0]) / (1 + 1e-6))


def test_all_equal_group_gets_zero_advantage():
    adv = grpo_advantages(torch.tensor([1.0, 1.0, 0.0, 0.0]), torch.tensor([0, 0, 1, 1]))
    assert torch.equal(adv, torch.zeros(4))


def test_rejects_two_dimensional_rewards():
    with pytest.raises(ValueError, match="1-D"):
        grpo_advantages(torch.zeros(2, 3), torch.tensor([0, 1]))

"""DAPO pieces: dynamic-sampling filter, overlong soft punishment, truncation masking."""

import pytest
import torch

from stare import dynamic_sampling_keep, overlong_penalty, truncated_mask


def test_dynamic_sampling_drops_zero_variance_groups_and_keeps_singletons():
    acc = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0])
    ids = ["a", "a", "a", "b", "b", "b", "c", "c", "d"]     # a all right, b all wrong, c mixed, d alone
    keep = dynamic_sampling_keep(acc, ids)
    assert keep.tolist() == [False] * 6 + [True, True, True]


def test_dynamic_sampling_with_unordered_integer_ids():
    acc = torch.tensor([0.5, 0.2, 0.5, 0.5])
    assert dynamic_sampling_keep(acc, torch.tensor([3, 9, 9, 3])).tolist() == [False, True, True, False]


@pytest.mark.parametrize("length, expected", [(3, 0.0), (16, 0.0), (17, -0.25), (18, -0.5), (20, -1.0)])
def test_overlong_penalty_hand_numbers(length, expected):
    # L_max 20, buffer 4: free up to 16 tokens, then −(L − 16)/4, reaching −1 at the budget
    assert overlong_penalty(torch.tensor([length]), 20, 4).item() == pytest.approx(expected)


def test_overlong_penalty_scales_with_factor_and_validates_buffer():
    assert overlong_penalty(torch.tensor([20]), 20, 4, factor=0.5).item() == pytest.approx(-0.5)
    for bad in (0, 21):
        with pytest.raises(ValueError, match="buffer"):
            overlong_penalty(torch.tensor([1]), 20, bad)


def test_truncated_mask_zeroes_truncated_rows_only():
    mask = torch.ones(3, 4, dtype=torch.long)
    out = truncated_mask(mask, torch.tensor([False, True, False]))
    assert out.tolist() == [[1] * 4, [0] * 4, [1] * 4] and out.dtype == torch.long

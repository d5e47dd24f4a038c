"""avg@k / pass@k by hand, and evaluation with the validation sampling."""

from __future__ import annotations

import pytest
import torch

from agents.trajectory import Trajectory
from training.evaluate import evaluate, score_groups


def _t(correct):
    return Trajectory(prompt_ids=[5, 6], response_ids=[7, 8, 9], loss_mask=[1, 0, 1],
                      grade_status="correct" if correct else "wrong", reward=float(correct),
                      metrics={"tool_calls": 1})


def test_avg_and_pass_at_k_by_hand():
    # problem 1: 1 of 4 correct; problem 2: 0 of 4; problem 3: 4 of 4
    trajs = [_t(c) for c in [1, 0, 0, 0] + [0, 0, 0, 0] + [1, 1, 1, 1]]
    assert score_groups(trajs, 4) == {"avg@4": pytest.approx(5 / 12), "pass@4": pytest.approx(2 / 3)}
    with pytest.raises(ValueError, match="groups of k=4"):
        score_groups(trajs[:5], 4)


def test_evaluate_reports_every_set_and_restores_the_rng(tiny_model):
    calls = []

    def play(tasks, k, seed):
        calls.append((list(tasks), k, seed))
        return [_t(i % 2 == 0) for i in range(len(tasks) * k)]
    torch.manual_seed(0)
    before = torch.get_rng_state()
    out = evaluate(play, tiny_model, {"a": ["t1", "t2"], "b": ["t3"]}, k=2, seed=7, pad_id=0, temperature=1.0,
                   token_budget=64)
    assert torch.equal(torch.get_rng_state(), before)
    assert calls == [(["t1", "t2"], 2, 7), (["t3"], 2, 7)]
    assert out["eval/a/avg@2"] == 0.5 and out["eval/a/pass@2"] == 1.0 and out["eval/b/num_problems"] == 1.0
    assert out["eval/a/response_length"] == 2.0 and out["eval/a/tool_calls"] == 1.0
    assert 0 < out["eval/a/entropy"] < 10

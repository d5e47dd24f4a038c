"""Trainer options around the algorithm: loss-aggregation scope, real-token micro-batch balancing, the
adaptive entropy bonus, and the fidelity fixes D5 (gate on a step without kept groups), D6 (stale
global-scope ω) and D9 (quadrant diagnostics with the applied weights)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

import stare
from training import runtime
from training.batch import balanced_micro_batches
from training.config import load_config
from training.gate import entropy_gate
from training.update import micro_loss, reduction


def test_balanced_micro_batches_spread_tokens_evenly_where_row_order_does_not():
    lengths = [4, 4, 4, 4, 1, 1, 1, 1]        # two long answers per prompt first, as rows arrive
    groups = balanced_micro_batches(lengths, list(range(8)), token_budget=8)
    assert groups == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert [sum(lengths[i] for i in g) for g in groups] == [5, 5, 5, 5]
    # 3 groups hold the 20 real tokens only if one padded group exceeds 8 tokens: it grows to 4.
    assert all(len(g) * max(lengths[i] for i in g) <= 8 for g in groups)
    assert balanced_micro_batches([30, 2], [5, 9], token_budget=8) == [[5], [9]]   # too long: alone
    assert balanced_micro_batches([], [], token_budget=8) == []


def test_micro_batch_scope_is_a_token_mean_per_micro_batch_times_its_sequence_share():
    totals = {"num_tokens": torch.tensor(8.0), "num_seqs": torch.tensor(2.0)}
    parts = [(torch.ones(1, 6), torch.tensor([[1, 1, 0, 0, 0, 0]])),          # 1 sequence, 2 tokens of 1
             (torch.full((1, 6), 4.0), torch.ones(1, 6))]                        # 1 sequence, 6 tokens of 4
    results = {}
    for scope in ("global", "micro_batch"):
        algo = stare.get_preset("dapo").replace(loss_agg_scope=scope)
        total = 0.0
        for loss_mat, mask in parts:
            counts, scale = reduction(SimpleNamespace(loss_mask=mask), algo, totals)
            total += float(stare.aggregate(loss_mat, mask, "token-mean", **counts) * scale)
        results[scope] = total
    assert results["global"] == pytest.approx((2 * 1 + 6 * 4) / 8)          # 3.25
    assert results["micro_batch"] == pytest.approx(1 * 0.5 + 4 * 0.5)        # 2.5: long answers weigh less


def _micro_batch(n_pos=10):
    logp = -torch.arange(1, n_pos + 1, dtype=torch.float32)[None]               # (1, 10), surprisal 1..10
    return SimpleNamespace(old_log_probs=logp.clone(), advantages=torch.ones(1),
                           loss_mask=torch.ones(1, n_pos), weights=None, tis_weights=None,
                           ref_log_probs=None), logp


def test_quadrants_of_micro_batch_scope_use_the_weights_the_loss_applied():
    mb, logp = _micro_batch()
    algo = stare.get_preset("stare-o1").replace(stare=stare.get_preset("stare-o1").stare.replace(w=2.0))
    ctl = runtime.controller_for(algo)                                            # gate starts on
    totals = {"num_tokens": torch.tensor(10.0), "num_seqs": torch.tensor(1.0)}
    _, metrics = micro_loss(logp, torch.zeros_like(logp), mb, algo, ctl, totals)
    # k = 1 of 10 positive tokens gets ω = 2: its |ω·A| share is 2 / (2 + 9), not 1 / 10.
    assert metrics["quadrant/pos_high/adv_share"].item() == pytest.approx(2 / 11)
    assert metrics["quadrant/pos_high/token_share"].item() == pytest.approx(0.1)


def test_entropy_bonus_weight_of_the_step_overrides_the_static_one():
    mb, logp = _micro_batch()
    algo = stare.get_preset("adaptive-entropy")
    ctl = runtime.controller_for(algo)
    totals = {"num_tokens": torch.tensor(10.0), "num_seqs": torch.tensor(1.0)}
    entropy = torch.full_like(logp, 0.5)
    plain, _ = micro_loss(logp, entropy, mb, algo, ctl, totals)
    bonus, _ = micro_loss(logp, entropy, mb, algo, ctl, totals, entropy_coef=0.2)
    assert (plain - bonus).item() == pytest.approx(0.2 * 0.5)


def test_gate_keeps_its_state_on_a_step_that_trains_nothing():
    ctl = stare.Controller(target_entropy=0.3)
    bonus = stare.EntropyCoefController(0.0, 0.3, delta=0.1)
    batch = SimpleNamespace(entropy=torch.full((2, 3), 0.9), loss_mask=torch.ones(2, 3))
    h_bar = entropy_gate(ctl, batch, feed=False, bonus=bonus)
    assert h_bar == pytest.approx(0.9) and ctl.gate_on and ctl.entropy != ctl.entropy and bonus.coef == 0.0
    entropy_gate(ctl, batch, bonus=bonus)
    assert not ctl.gate_on and ctl.entropy == pytest.approx(0.9)
    assert bonus.coef == 0.0 and bonus.entropy == pytest.approx(0.9)        # above target: stays at its floor


def test_global_scope_refuses_stale_weights_over_several_mini_batches():
    cfg = load_config(None, ["algo=stare-o1", "algo.stare.scope=global_batch", "train.mini_batches=2"])
    with pytest.raises(ValueError, match="go stale after the first optimizer step"):
        runtime.check_config(cfg)
    runtime.check_config(load_config(None, ["algo=stare-o1", "algo.stare.scope=micro_batch",
                                            "train.mini_batches=2"]))
    with pytest.raises(ValueError, match="set one of them to false"):
        runtime.check_config(load_config(None, ["train.balance_micro_batches=true",
                                                "train.sort_micro_batches=true"]))


def test_adaptive_bonus_and_authors_layout_train_end_to_end(make_cfg, run_training):
    cfg = make_cfg("algo=adaptive-entropy", "algo.entropy_target=100", "algo.loss_agg_scope=micro_batch",
                   "train.balance_micro_batches=true", "train.micro_batch_tokens=64")
    run_training(cfg)
    records = [json.loads(x) for x in (cfg.run_path / "metrics.jsonl").read_text().splitlines()]
    coefs = [r["entropy_ctl/coef"] for r in records]
    assert coefs == pytest.approx([0.005, 0.010])          # H̄ <= 100 each step: +0.005 per step
    assert records[-1]["entropy_ctl/applied_coef"] == pytest.approx(0.010)


def test_adaptive_bonus_weight_survives_a_resume(make_cfg, run_training, tmp_path):
    common = ["algo=adaptive-entropy", "algo.entropy_target=100", "log.save_every=1"]
    run_training(make_cfg(*common, "train.steps=2", "log.name=resumed"))
    run_training(make_cfg(*common, "train.steps=3", "log.name=resumed"), resume=True)
    lines = (tmp_path / "runs" / "resumed" / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(x) for x in lines]
    # 0.005 per step from 0, continuing after the restart (a fresh controller would log 0.005 at step 3)
    assert [r["entropy_ctl/coef"] for r in records] == pytest.approx([0.005, 0.010, 0.015])


def test_rows_go_to_the_least_loaded_process_with_room():
    from training.rank_balance import balanced_owners
    # longest first: 9 -> p0, 8 -> p1, 5 -> p1 (8 < 9), 4 -> p0 (9 < 13), 2 -> p0 (13 = 13: lower rank),
    # 1 -> p1 (p0 is full at ⌈6 / 2⌉ = 3 rows)
    assert balanced_owners([4, 9, 2, 8, 5, 1], 2) == [0, 0, 0, 1, 1, 1]
    loads = [sum(n for n, o in zip([4, 9, 2, 8, 5, 1], balanced_owners([4, 9, 2, 8, 5, 1], 2),
                                   strict=True) if o == r) for r in (0, 1)]
    assert loads == [15, 14] and balanced_owners([3, 3, 3], 2).count(0) == 2     # ⌈3 / 2⌉ rows at most

"""Training on per-turn samples: episode-level advantages per turn, each sampled token counted once."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

import stare
from agents.trajectory import Segment, Trajectory
from training.advantages import episode_rows, make_batch
from training.config import load_config
from training.gate import entropy_gate
from training.metrics import episode_metrics
from training.sampling import Collected, CollectSettings, TaskStream, collect
from training.weights import stare_weights

S = int(Segment.SAMPLED)


def _sample(prompt, ids, turn, reward, group):
    n = len(ids)
    return Trajectory(prompt_ids=prompt, response_ids=ids, loss_mask=[1] * n, logprobs=[-0.5] * n,
                      turn_index=[turn] * n, segment=[S] * n, reward=reward, group_id=group, num_turns=2)


def per_turn_episode(reward: float, group: int = 0) -> Trajectory:
    """Two turns: prompt [5, 6] -> [7, 8, 9]; the rewritten history [5, 10, 11] -> [12, 13]."""
    samples = [_sample([5, 6], [7, 8, 9], 0, reward, group), _sample([5, 10, 11], [12, 13], 1, reward, group)]
    last = samples[-1]
    return dataclasses.replace(last, samples=samples, num_turns=2)


def append_episode(reward: float, group: int = 0) -> Trajectory:
    """Two turns in one sequence: sampled 7, tool 20 21, sampled 22."""
    return Trajectory(prompt_ids=[5, 6], response_ids=[7, 20, 21, 22], loss_mask=[1, 0, 0, 1],
                      logprobs=[-0.5, 0.0, 0.0, -0.5], turn_index=[0, 0, 0, 1], segment=[S, 2, 2, S],
                      reward=reward, group_id=group, num_turns=2)


@pytest.fixture(scope="module")
def cfg():
    return load_config(None, [])


def test_episode_advantage_applies_to_each_turn_and_each_sampled_token_is_one_row(cfg):
    algo = dataclasses.replace(stare.PRESETS["dapo"], norm_adv_by_std=False, overlong_buffer=0)
    episodes = [per_turn_episode(1.0), append_episode(0.0)]
    batch = make_batch(Collected(kept=episodes, all=episodes), algo, cfg, pad_id=0)
    # Group of two episodes (not three rows): mean reward 0.5, so A = +0.5 for both turns, -0.5.
    assert batch.size == 3 and batch.advantages.tolist() == [0.5, 0.5, -0.5]
    assert float(batch.loss_mask.sum()) == 3 + 2 + 2 == sum(t.sampled_tokens for t in episodes)
    trained = batch.response_ids[batch.loss_mask > 0].tolist()
    assert sorted(trained) == sorted([7, 8, 9, 12, 13, 7, 22])   # every sampled token exactly once
    # The gate's H̄ is the token mean over those 7 tokens (entropy = token id, by hand: 78 / 7).
    h_bar = entropy_gate(stare.Controller(), batch.with_(entropy=batch.response_ids.float()))
    assert h_bar == pytest.approx(78 / 7)


def test_stare_selects_the_same_candidates_as_one_sequence_holding_the_same_tokens(cfg):
    """Per-turn rows vs one append-only row with the same sampled tokens (tool tokens 10, 11 masked)."""
    algo = dataclasses.replace(stare.PRESETS["stare-c2"], norm_adv_by_std=False, overlong_buffer=0)
    algo = dataclasses.replace(algo, stare=dataclasses.replace(algo.stare, top_ratio=0.3))
    flat = Trajectory(prompt_ids=[5, 6], response_ids=[7, 8, 9, 10, 11, 12, 13],
                      loss_mask=[1, 1, 1, 0, 0, 1, 1], logprobs=[-0.5] * 3 + [0.0] * 2 + [-0.5] * 2,
                      turn_index=[0] * 5 + [1] * 2,
                      segment=[S] * 3 + [2] * 2 + [S] * 2, reward=1.0, num_turns=2)
    picked = []
    for episode in (per_turn_episode(1.0), flat):
        batch = make_batch(Collected(kept=[episode, append_episode(0.0)], all=[]), algo, cfg, pad_id=0)
        controller = stare.Controller(target_entropy=100.0)
        controller.update(1.0)                                      # gate on
        surprisal = -batch.response_ids.float().masked_fill(batch.loss_mask == 0, 0.0)   # logp = -id
        weights, stats = stare_weights(surprisal, batch, algo, controller)
        trained = batch.loss_mask > 0
        tokens = zip(batch.response_ids[trained].tolist(), weights[trained].tolist(), strict=True)
        picked.append((sorted(tokens),
                       {k: float(v) for k, v in stats.items()}))
    assert picked[0] == picked[1] and any(w != 1.0 for _, w in picked[0][0])


def test_overlong_penalty_and_truncation_use_the_episode(cfg):
    algo = dataclasses.replace(stare.PRESETS["dapo"], norm_adv_by_std=False, overlong_buffer=2,
                               overlong_penalty=1.0, mask_truncated=True)
    small = dataclasses.replace(cfg, rollout=dataclasses.replace(cfg.rollout, max_response_tokens=4))
    long = per_turn_episode(1.0)
    long.finish_reason = "length"
    for sample in long.samples:
        sample.finish_reason = "length"
    # Episode lengths: 3 + 2 - 2 = 3 (penalty -(3 - 2) / 2 = -0.5) and 4 (penalty -1): r = 0.5, -1,
    # mean -0.25, A = +0.75 on both turns and -0.75 (the last turn's 2 tokens alone would give no penalty).
    assert long.response_length == 3
    batch = make_batch(Collected(kept=[long, append_episode(0.0)], all=[]), algo, small, pad_id=0)
    assert batch.advantages.tolist() == pytest.approx([0.75, 0.75, -0.75])
    assert batch.loss_mask[:2].sum() == 0 and batch.loss_mask[2].sum() == 2   # truncated episode: all turns


def test_episode_rows_repeat_values_per_turn():
    rows, values = episode_rows([append_episode(0.0), per_turn_episode(1.0)], torch.tensor([3.0, 4.0]))
    assert [len(r.response_ids) for r in rows] == [4, 3, 2] and values.tolist() == [3.0, 4.0, 4.0]


def test_dynamic_sampling_filters_by_episode_not_by_turn():
    def play(tasks, group_size, seed):   # task 0: two correct per-turn episodes (4 rows); task 1: 1 vs 0
        rewards = {0: (1.0, 1.0), 1: (1.0, 0.0)}
        return [per_turn_episode(r, g) for g, task in enumerate(tasks) for r in rewards[task]]

    settings = CollectSettings(seed=0, prompts=1, per_round=2, group_size=2, dynamic_sampling=True,
                               max_rounds=1, drop_failed=True)
    got = collect(play, TaskStream([0, 1], seed=0, shuffle=False), settings, step=1)
    assert got.groups_kept == 1 and len(got.kept) == 2 and {t.reward for t in got.kept} == {0.0, 1.0}


def test_metrics_report_turns_samples_and_episodes_separately():
    m = episode_metrics([per_turn_episode(1.0), append_episode(0.0)])
    assert m["train/turns"] == 2.0 and m["train/samples"] == 1.5 and m["train/per_turn"] == 0.5
    assert m["train/response_length"] == (5 + 2) / 2          # sampled tokens per episode, each once
    assert m["train/total_length"] == (3 + 4) / 2             # tokens past the first prompt


def test_training_runs_end_to_end_on_per_turn_samples(make_cfg, run_training):
    cfg = make_cfg("rollout.history=per_turn")
    run_training(cfg)
    records = [json.loads(x) for x in (cfg.run_path / "metrics.jsonl").read_text().splitlines()]
    for r in records:
        assert r["train/per_turn"] == 1.0 and r["train/samples"] == pytest.approx(r["train/turns"])
        episodes = r["train/episodes"]   # 6 per generation round (2 prompts x 3)
        assert episodes in (6, 12) and r["train/rows"] == round(r["train/turns"] * episodes)
    # (The random tiny model never writes a tool call, so these episodes have one turn: the trainer path
    # of per-turn rows; several turns per episode are covered by the make_batch tests above.)
    assert any(r["train/groups_kept"] > 0 for r in records)

"""Step stage 2: rewards (+ DAPO overlong penalty), GRPO advantages, the padded batch, truncation mask.

r_i  = reward_i + overlong_penalty(len_i)          (algo.overlong_buffer > 0; DAPO)
A_i  = (r_i − mean_group r) / (std_group r)        (stare.grpo_advantages; std only with norm_adv_by_std)
mask = loss mask, zeroed on truncated rows         (algo.mask_truncated; DAPO)

i indexes episodes: rewards, lengths and group statistics are per episode. An episode trained as
per-turn samples (`Trajectory.samples`, a history-rewriting chat template) becomes one batch row per
turn, each with the episode's A_i; every sampled token is in exactly one row, so token-mean losses,
the entropy gate and STARE's candidate sets count each sampled token once (docs/training.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

import stare
from agents.trajectory import Trajectory
from training import distributed
from training.batch import Batch, collate, placeholder_rows
from training.config import TrainConfig
from training.rank_balance import balance_across_processes
from training.sampling import Collected


def make_batch(collected: Collected, algo: stare.AlgoConfig, cfg: TrainConfig, *, pad_id: int,
               update: bool = True) -> Batch:
    """Rewards (+ overlong penalty), GRPO advantages, padding, DAPO truncation masking.

    The kept trajectories, or, when no process kept any (`update` false), every trajectory of the
    step with zero advantages (used only for the entropy; no update follows). A process that kept
    no group while others did gets placeholder rows (loss mask 0), so it joins the collectives and
    the gradient all-reduce without adding a token. With several processes every process holds at
    least `train.mini_batches` rows, so all run the same number of optimizer steps. With
    `train.balance_micro_batches` the rows are then rebalanced over processes by real tokens
    (`training.rank_balance`, a collective every process joins).
    """
    if not update:
        rows, _ = episode_rows(collected.all, torch.zeros(len(collected.all)))
        return collate(rows, torch.zeros(len(rows)), pad_id=pad_id)
    batch = _kept_batch(collected, algo, cfg, pad_id=pad_id)
    if cfg.train.balance_micro_batches:
        batch = balance_across_processes(batch)
    if distributed.world_size() > 1 and batch.size < cfg.train.mini_batches:
        batch = placeholder_rows(batch, cfg.train.mini_batches)
    return batch


def _kept_batch(collected: Collected, algo: stare.AlgoConfig, cfg: TrainConfig, *, pad_id: int) -> Batch:
    """The kept trajectories' batch (placeholder rows when this process kept none)."""
    if not collected.kept:
        blank = collate(collected.all[0].rows()[:1], torch.zeros(1), pad_id=pad_id)
        blank = blank.with_(loss_mask=torch.zeros_like(blank.loss_mask))
        return placeholder_rows(blank, cfg.train.mini_batches)
    trajs = collected.kept
    rewards = torch.tensor([t.reward for t in trajs], dtype=torch.float32)
    if algo.overlong_buffer > 0:
        lengths = torch.tensor([t.response_length for t in trajs])
        rewards = rewards + stare.overlong_penalty(lengths, cfg.rollout.max_response_tokens,
                                                   algo.overlong_buffer, algo.overlong_penalty)
    group_ids = torch.tensor([t.group_id for t in trajs])
    advantages = stare.grpo_advantages(rewards, group_ids, norm_std=algo.norm_adv_by_std)
    rows, row_advantages = episode_rows(trajs, advantages)
    batch = collate(rows, row_advantages, pad_id=pad_id)
    if algo.mask_truncated:
        truncated = torch.tensor([t.finish_reason == "length" for t in rows])
        batch = batch.with_(loss_mask=stare.truncated_mask(batch.loss_mask, truncated))
    return batch


def episode_rows(episodes: Sequence[Trajectory], values: Tensor) -> tuple[list[Trajectory], Tensor]:
    """The batch rows of episodes (`Trajectory.rows()`) with each episode's value repeated per row.

    Args:
        episodes: E episodes.
        values: (E,) one value per episode (e.g. its advantage A_i).

    Returns:
        (rows, (N,) values), N = Σ_i rows of episode i: an append-only episode is one row, a per-turn
        episode one row per assistant turn.
    """
    counts = torch.tensor([len(t.rows()) for t in episodes], dtype=torch.long)               # (E,)
    rows = [row for t in episodes for row in t.rows()]
    return rows, torch.repeat_interleave(values, counts)                                     # (N,)

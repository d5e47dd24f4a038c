"""Step stage 2: rewards (+ DAPO overlong penalty), GRPO advantages, the padded batch, truncation mask.

r_i  = reward_i + overlong_penalty(len_i)          (algo.overlong_buffer > 0; DAPO)
A_i  = (r_i − mean_group r) / (std_group r)        (stare.grpo_advantages; std only with norm_adv_by_std)
mask = loss mask, zeroed on truncated rows         (algo.mask_truncated; DAPO)
"""

from __future__ import annotations

import torch

import stare
from training import distributed
from training.batch import Batch, collate, placeholder_rows
from training.config import TrainConfig
from training.sampling import Collected


def make_batch(collected: Collected, algo: stare.AlgoConfig, cfg: TrainConfig, *, pad_id: int,
               update: bool = True) -> Batch:
    """Rewards (+ overlong penalty), GRPO advantages, padding, DAPO truncation masking.

    The kept trajectories, or, when no process kept any (`update` false), every trajectory of the
    step with zero advantages (used only for the entropy; no update follows). A process that kept
    no group while others did gets placeholder rows (loss mask 0), so it joins the collectives and
    the gradient all-reduce without adding a token. With several processes every process holds at
    least `train.mini_batches` rows, so all run the same number of optimizer steps.
    """
    if not update:
        return collate(collected.all, torch.zeros(len(collected.all)), pad_id=pad_id)
    if not collected.kept:
        blank = collate(collected.all[:1], torch.zeros(1), pad_id=pad_id)
        blank = blank.with_(loss_mask=torch.zeros_like(blank.loss_mask))
        return placeholder_rows(blank, cfg.train.mini_batches)
    trajs = collected.kept
    rewards = torch.tensor([t.reward for t in trajs], dtype=torch.float32)
    if algo.overlong_buffer > 0:
        lengths = torch.tensor([len(t.response_ids) for t in trajs])
        rewards = rewards + stare.overlong_penalty(lengths, cfg.rollout.max_response_tokens,
                                                   algo.overlong_buffer, algo.overlong_penalty)
    group_ids = torch.tensor([t.group_id for t in trajs])
    advantages = stare.grpo_advantages(rewards, group_ids, norm_std=algo.norm_adv_by_std)
    batch = collate(trajs, advantages, pad_id=pad_id)
    if algo.mask_truncated:
        truncated = torch.tensor([t.finish_reason == "length" for t in trajs])
        batch = batch.with_(loss_mask=stare.truncated_mask(batch.loss_mask, truncated))
    if distributed.world_size() > 1 and batch.size < cfg.train.mini_batches:
        batch = placeholder_rows(batch, cfg.train.mini_batches)
    return batch

"""Supervised warm start on demonstration trajectories: loss on sampled (loss-mask) tokens only.

The demonstrations are `agents.Trajectory` records produced by the real env and rollout loop, so
the tokens, the injected tool output and the masks are exactly what RL will see. Injected tokens are
context, never targets.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from agents.trajectory import Trajectory
from training.batch import collate
from training.logprobs import forward_logprobs


@dataclass(frozen=True, kw_only=True)
class SFTConfig:
    """Settings of the supervised warm start."""

    steps: int = 800
    """Optimizer steps."""
    batch_size: int = 64
    """Demonstrations per step, drawn without replacement, reshuffled every epoch."""
    lr: float = 3e-3
    """Peak AdamW learning rate."""
    warmup_steps: int = 50
    """Linear warmup from 0 to `lr`; cosine decay to 0 afterwards."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    grad_clip: float = 1.0
    """Global gradient-norm clip."""
    seed: int = 0
    """Seed of the shuffling."""

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"SFTConfig.{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.warmup_steps < self.steps:
            raise ValueError(f"SFTConfig.warmup_steps must be in [0, steps), got {self.warmup_steps}")


def sft_loss(model: PreTrainedModel, demos: Sequence[Trajectory], *, pad_id: int) -> torch.Tensor:
    """Token-mean negative log-likelihood of the sampled tokens of `demos`.

    L = -sum_{i,t} m_it log p(y_it | y_<it) / sum_{i,t} m_it, with m the loss mask (B, R): prompt,
    injected tool output and template glue are context only.
    """
    batch = collate(demos, torch.zeros(len(demos)), pad_id=pad_id)
    logp, _ = forward_logprobs(model, batch, 1.0)  # (B, R)
    return -(logp * batch.loss_mask).sum() / batch.loss_mask.sum().clamp(min=1.0)


def lr_at(step: int, cfg: SFTConfig) -> float:
    """Learning rate at 0-based `step`: linear warmup, then cosine decay to 0."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.lr * 0.5 * (1.0 + math.cos(math.pi * progress))


def train_sft(
    model: PreTrainedModel,
    demos: Sequence[Trajectory],
    cfg: SFTConfig,
    *,
    pad_id: int,
    log: Callable[[int, float, float], None] | None = None,
) -> list[float]:
    """Fit `model` to the sampled tokens of `demos` with AdamW; returns the loss of every step.

    The loss of one step is `sft_loss` of a batch of `cfg.batch_size` demonstrations.
    `log(step, loss, seconds)` is called every 50 steps and at the end when given.
    """
    if not demos:
        raise ValueError("train_sft needs at least one demonstration trajectory")
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    order, rng, losses, start = [], random.Random(cfg.seed), [], time.perf_counter()
    model.train()
    for step in range(cfg.steps):
        if len(order) < cfg.batch_size:
            order += rng.sample(range(len(demos)), len(demos))
        batch, order = order[: cfg.batch_size], order[cfg.batch_size :]
        loss = sft_loss(model, [demos[i] for i in batch], pad_id=pad_id)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        losses.append(loss.item())
        if log is not None and ((step + 1) % 50 == 0 or step + 1 == cfg.steps):
            log(step + 1, losses[-1], time.perf_counter() - start)
    model.eval()
    return losses

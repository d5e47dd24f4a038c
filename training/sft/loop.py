"""The supervised loop on token trajectories: loss on sampled (loss-mask) tokens only.

Used by `stare sft` (`training.sft.run`) and by the CPU preset's warm start, so both are one
mechanism. The trajectories come from `training.sft.encode` (or straight from rollouts), so the
tokens, injected tool output and masks are exactly what RL sees; injected tokens are context only.

One step: the next `batch_size` demonstrations of a seeded order (`DemoOrder`), split into
micro-batches of at most `micro_batch_tokens` padded tokens, rows grouped by length (less padding),
gradients accumulated so the step's loss is the token mean over the whole batch:

    L = -Σ_{i,t} m_it log p(y_it | y_<it) / Σ_{i,t} m_it          (m: loss mask, (B, R))

then gradient clipping and one AdamW step at `lr_at(step)`.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agents.trajectory import Trajectory
from training.batch import collate, micro_batches
from training.logprobs import forward_logprobs, to_device


@dataclass(frozen=True, kw_only=True)
class SFTConfig:
    """Settings of a supervised run."""

    steps: int = 800
    """Optimizer steps."""
    batch_size: int = 64
    """Demonstrations per step, drawn without replacement, reshuffled every pass."""
    lr: float = 3e-3
    """Peak AdamW learning rate."""
    warmup_steps: int = 50
    """Linear warmup from 0 to `lr`; cosine decay to 0 afterwards."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    grad_clip: float = 1.0
    """Global gradient-norm clip (0 = none)."""
    micro_batch_tokens: int = 0
    """Padded tokens per forward/backward micro-batch, rows grouped by length (0 = whole batch)."""
    seed: int = 0
    """Seed of the demonstration order."""

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"SFTConfig.{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.warmup_steps < self.steps:
            raise ValueError(f"SFTConfig.warmup_steps must be in [0, steps), got {self.warmup_steps}")
        if self.lr <= 0 or self.micro_batch_tokens < 0:
            raise ValueError("SFTConfig.lr must be > 0 and micro_batch_tokens >= 0")


class DemoOrder:
    """The seeded demonstration order: batch s is a pure function of (seed, n, batch_size, s).

    Indices are drawn from shuffled passes over the n demonstrations (`random.Random(seed).sample`
    each pass); `skip(s)` replays the draws of s steps, so a resumed run sees the same batches.
    """

    def __init__(self, n: int, batch_size: int, seed: int) -> None:
        if n < 1:
            raise ValueError("no demonstrations to train on")
        self.n, self.batch_size = n, batch_size
        self._rng = random.Random(seed)
        self._queue: list[int] = []

    def next(self) -> list[int]:
        """The indices of the next batch."""
        while len(self._queue) < self.batch_size:
            self._queue += self._rng.sample(range(self.n), self.n)
        out, self._queue = self._queue[: self.batch_size], self._queue[self.batch_size :]
        return out

    def skip(self, steps: int) -> None:
        """Advance past `steps` batches."""
        for _ in range(steps):
            self.next()


def sft_loss(model: Any, demos: Sequence[Trajectory], *, pad_id: int) -> torch.Tensor:
    """Token-mean negative log-likelihood of the sampled tokens of `demos` (module docstring)."""
    batch = collate(demos, torch.zeros(len(demos)), pad_id=pad_id)
    logp, _ = forward_logprobs(model, batch, 1.0)  # (B, R)
    return -(logp * batch.loss_mask).sum() / batch.loss_mask.sum().clamp(min=1.0)


def lr_at(step: int, cfg: SFTConfig) -> float:
    """Learning rate at 0-based `step`: linear warmup, then cosine decay to 0."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.lr * 0.5 * (1.0 + math.cos(math.pi * progress))


def sft_step(
    model: Any,
    optimizer: Any,
    demos: Sequence[Trajectory],
    cfg: SFTConfig,
    *,
    pad_id: int,
    lr: float,
    accelerator: Any = None,
) -> dict[str, float]:
    """One optimizer step on `demos`; returns loss, grad norm, tokens and padding share.

    With `micro_batch_tokens` the batch is cut by `training.batch.micro_batches` (rows sorted by
    length); each micro-batch's summed NLL is divided by the whole batch's token count, so the
    accumulated gradient equals that of `sft_loss` on the batch.
    """
    batch = collate(demos, torch.zeros(len(demos)), pad_id=pad_id)
    total = batch.loss_mask.sum().clamp(min=1.0)
    rows = list(range(batch.size))
    groups = (
        micro_batches(batch, rows, cfg.micro_batch_tokens, by_length=True)
        if cfg.micro_batch_tokens
        else [rows]
    )
    device = accelerator.device if accelerator is not None else next(model.parameters()).device
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    loss_sum, padded = 0.0, 0
    for rows_mb in groups:
        mb = to_device(batch.select(rows_mb), device)
        logp, _ = forward_logprobs(model, mb, 1.0)
        loss = -(logp * mb.loss_mask).sum() / total
        (accelerator.backward(loss) if accelerator is not None else loss.backward())
        loss_sum += float(loss.detach())
        padded += int(mb.input_ids.numel())
    clip = accelerator.clip_grad_norm_ if accelerator is not None else torch.nn.utils.clip_grad_norm_
    norm = clip(model.parameters(), cfg.grad_clip if cfg.grad_clip > 0 else float("inf"))
    optimizer.step()
    real = int(batch.attention_mask.sum())
    return {
        "sft/loss": loss_sum,
        "sft/grad_norm": float(norm),
        "sft/lr": lr,
        "sft/trained_tokens": float(total),
        "sft/micro_batches": float(len(groups)),
        "sft/padding": 1.0 - real / max(1, padded),
    }


def train_sft(
    model: Any,
    demos: Sequence[Trajectory],
    cfg: SFTConfig,
    *,
    pad_id: int,
    log: Callable[[int, float, float], None] | None = None,
) -> list[float]:
    """Fit `model` to the sampled tokens of `demos` in one process; returns the loss of every step.

    `log(step, loss, seconds)` is called every 50 steps and at the end when given. (`stare sft`
    adds accelerate, checkpoints and metrics around the same `sft_step`: `training.sft.run`.)
    """
    if not demos:
        raise ValueError("train_sft needs at least one demonstration trajectory")
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    order, losses, start = DemoOrder(len(demos), cfg.batch_size, cfg.seed), [], time.perf_counter()
    model.train()
    for step in range(cfg.steps):
        record = sft_step(
            model, opt, [demos[i] for i in order.next()], cfg, pad_id=pad_id, lr=lr_at(step, cfg)
        )
        losses.append(record["sft/loss"])
        if log is not None and ((step + 1) % 50 == 0 or step + 1 == cfg.steps):
            log(step + 1, losses[-1], time.perf_counter() - start)
    model.eval()
    return losses

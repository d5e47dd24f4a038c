"""The policy update of one step (stages 6-7): loss, backward and optimizer step, in one loop.

For each epoch, each mini-batch (one optimizer step), each token-budgeted micro-batch:

    logp, H = forward(model, micro-batch)            # (b, r) each, with grad; or the fused pass's graphs
    w       = ω · w_TIS                              # training.weights.micro_batch_weights
    loss    = stare.policy_loss(logp, logp_old, A, mask, w, agg, N_tokens/N_seqs of the mini-batch)
            + kl_coef · agg(KL(π‖π_ref))  - entropy_coef · agg(H)        (both off by default)
    backward

then gradient clipping and one optimizer step per mini-batch. The global counts make the
micro-batch losses add up to the mini-batch loss exactly, whatever the micro-batch split.

Fused (on-policy, `UpdateSettings.fused`), the micro-batches were already forwarded with grad by
`training.logprobs.forward_pass` (the same forward gave π_old and the entropy gate's input): the
loop back-propagates those graphs instead of forwarding again.

With W data-parallel processes the counts are summed over processes (N = Σ_ranks N_r) and each
process back-propagates W · loss_r: DDP / FSDP / ZeRO average gradients over processes, so the
step's gradient is ∇ Σ_r loss_r = the token mean over the global mini-batch, exactly as in one
process holding every row.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

import stare
from training import distributed
from training.batch import Batch, equal_micro_batches, mini_batches
from training.config import TrainConfig
from training.logprobs import Forward, forward_logprobs, to_device
from training.weights import micro_batch_weights


@dataclass(frozen=True, kw_only=True)
class UpdateSettings:
    """How the step's forward passes and update run (built once at setup, `from_config`)."""

    temperature: float
    """Rollout temperature: log-probs and entropy are computed under it."""
    token_budget: int
    """Padded tokens (prompt + response) of one forward/backward micro-batch."""
    grad_clip: float = 0.0
    """Max global gradient norm (0 = off; the norm is still measured)."""
    mini_batches: int = 1
    """Optimizer steps per epoch."""
    epochs: int = 1
    """Passes over the batch."""
    by_length: bool = False
    """Group rows of similar length into micro-batches (`training.batch.micro_batches`)."""
    fused: bool = False
    """The update's forward pass doubles as the old-log-prob pass (on-policy, one process)."""

    @classmethod
    def from_config(cls, cfg: TrainConfig, processes: int = 1) -> UpdateSettings:
        """The settings of `cfg`; fused when `train.fuse_on_policy` and on-policy in one process.

        With several processes the separate no-grad pass is used: the fused path runs every forward
        before any backward, which DDP's gradient reducer does not allow.
        """
        t = cfg.train
        return cls(temperature=cfg.rollout.temperature, token_budget=t.micro_batch_tokens,
                   grad_clip=cfg.optim.grad_clip, mini_batches=t.mini_batches, epochs=t.epochs,
                   by_length=t.sort_micro_batches,
                   fused=t.fuse_on_policy and t.mini_batches == 1 and t.epochs == 1 and processes == 1)


def global_totals(mask: Tensor, device: torch.device | str) -> dict[str, Tensor]:
    """Token and sequence counts of a mini-batch over all processes (`num_tokens`, `num_seqs`).

    Args:
        mask: (B_r, R) loss mask of this process's rows of the mini-batch.
        device: where the loss is computed.
    """
    counts = torch.stack([mask.sum(), (mask.sum(-1) > 0).sum().to(mask.dtype)]).double()
    counts = distributed.all_sum(counts).to(torch.float32)
    return {"num_tokens": counts[0].to(device), "num_seqs": counts[1].to(device)}


def update_policy(model: nn.Module, optimizer: torch.optim.Optimizer, batch: Batch,
                  settings: UpdateSettings, *, algo: stare.AlgoConfig, controller: stare.Controller,
                  accelerator: Any, forward: Forward | None = None) -> dict[str, float]:
    """Run the update of one step; returns metrics averaged over micro-batches (one sync at the end).

    Args:
        model: the prepared policy (train mode is set here).
        optimizer: the prepared optimizer.
        batch: the full batch with `old_log_probs` (and `ref_log_probs` when kl_coef > 0, `weights`
            when algo.stare.scope is global_batch, `tis_weights` with TIS).
        settings: micro-/mini-batching, epochs, clipping, fused or not.
        algo: the algorithm settings.
        controller: the STARE controller, already updated with this step's entropy.
        accelerator: the `accelerate.Accelerator` (backward, clipping, no_sync).
        forward: the fused pass's graphs (`training.logprobs.forward_pass`); needed when fused.

    Returns:
        `actor/*` and `stare/*` metrics as floats, plus `actor/grad_norm` (mean over optimizer steps).
    """
    if algo.kl_coef > 0 and batch.ref_log_probs is None:
        raise ValueError("algo.kl_coef > 0 needs reference log-probs; the trainer computes them when a "
                         "reference model exists")
    graphs = forward.graphs if forward is not None else None
    if settings.fused != (graphs is not None) or (graphs and settings.mini_batches * settings.epochs != 1):
        raise ValueError("a fused update needs the fused forward pass's graphs and one mini-batch, one epoch")
    model.train()
    device = accelerator.device
    sums: dict[str, Tensor] = defaultdict(lambda: torch.zeros((), device=device))
    counts: dict[str, int] = defaultdict(int)
    norms: list[Tensor] = []
    for _ in range(settings.epochs):
        for rows in mini_batches(batch.size, settings.mini_batches):
            totals = global_totals(batch.loss_mask[rows], device)
            padded, groups = equal_micro_batches(batch, rows, settings.token_budget,
                                                 by_length=settings.by_length)
            for index, group in enumerate(groups):
                mb = to_device(padded.select(group), device)
                with _maybe_no_sync(accelerator, model, index < len(groups) - 1):
                    logp, entropy = graphs[index] if graphs else forward_logprobs(
                        model, mb, settings.temperature, entropy_grad=algo.entropy_coef > 0)
                    loss, metrics = micro_loss(logp, entropy, mb, algo, controller, totals)
                    accelerator.backward(loss * accelerator.num_processes)
                if group[0] >= batch.size:     # a placeholder micro-batch: no tokens, no metrics
                    continue
                for key, value in metrics.items():
                    sums[key] = sums[key] + value.detach().float()
                    counts[key] += 1
            norms.append(_clip(accelerator, model, settings.grad_clip))
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    out = {key: float(value) / counts[key] for key, value in sums.items()}
    out["actor/grad_norm"] = float(torch.stack(norms).float().mean()) if norms else 0.0
    out["actor/optimizer_steps"] = float(len(norms))
    return out


def micro_loss(logp: Tensor, entropy: Tensor, mb: Batch, algo: stare.AlgoConfig, controller: stare.Controller,
               totals: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
    """Loss of one micro-batch from its current log-probs (B, R) and entropy (B, R), plus metrics."""
    weights, stats = micro_batch_weights(logp, mb, algo, controller)
    loss, metrics = stare.policy_loss(
        logp, mb.old_log_probs, mb.advantages, mb.loss_mask, clip_low=algo.clip_low, clip_high=algo.clip_high,
        clip_c=algo.clip_c, weights=weights, agg=algo.loss_agg, **totals)
    if algo.kl_coef > 0:
        kl = stare.aggregate(stare.kl_penalty(logp, mb.ref_log_probs, algo.kl_estimator), mb.loss_mask,
                             algo.loss_agg, **totals)
        loss = loss + algo.kl_coef * kl
        metrics["actor/kl_loss"] = kl.detach()
    if algo.entropy_coef > 0:
        ent_term = stare.aggregate(entropy, mb.loss_mask, algo.loss_agg, **totals)
        loss = loss - algo.entropy_coef * ent_term
    metrics["actor/entropy"] = stare.masked_mean(entropy.detach(), mb.loss_mask)
    metrics.update(stats)
    return loss, metrics


def _clip(accelerator: Any, model: nn.Module, grad_clip: float) -> Tensor:
    if grad_clip > 0:
        return torch.as_tensor(accelerator.clip_grad_norm_(model.parameters(),
                                                           grad_clip)).detach().float().cpu()
    grads = [p.grad.detach().norm() for p in model.parameters() if p.grad is not None]
    return torch.stack(grads).norm().float().cpu() if grads else torch.zeros(())


def _maybe_no_sync(accelerator: Any, model: nn.Module, skip_sync: bool) -> contextlib.AbstractContextManager:
    """Skip the DDP gradient all-reduce on all but the last micro-batch of a mini-batch."""
    return accelerator.no_sync(model) if skip_sync else contextlib.nullcontext()

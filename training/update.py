"""The policy update of one step (stages 6-7): loss, backward and optimizer step, in one loop.

For each epoch, each mini-batch (one optimizer step), each token-budgeted micro-batch:

    logp, H = forward(model, micro-batch)            # (b, r) each, with grad; or the fused pass's graphs
    w       = ω · w_TIS                              # training.weights.micro_batch_weights
    loss    = s · [stare.algo_policy_loss(algo, logp, logp_old, A, mask, H, w, agg, counts)
                   + kl_coef · agg(KL(π‖π_ref))  - c_H · agg(H)]        (KL and bonus off by default)
    backward

`algo_policy_loss` applies the surrogate of `algo.loss_mode` and the forking-token mask; c_H is
`algo.entropy_coef`, or the adaptive controller's weight. With `algo.loss_agg_scope="global"` the
counts are N_tokens / N_seqs of the mini-batch and s = 1; with "micro_batch" (the authors' actor) the
counts are the micro-batch's own and s = its share of the mini-batch's sequences.

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
    balance: bool = False
    """Balance micro-batches by real tokens (`training.batch.balanced_micro_batches`)."""
    norm_length: int = 0
    """L of the `seq-mean-token-sum-norm` reduction (Dr. GRPO): algo.loss_norm_length, else the budget."""

    @classmethod
    def from_config(cls, cfg: TrainConfig, processes: int = 1) -> UpdateSettings:
        """The settings of `cfg`; fused when `train.fuse_on_policy` and on-policy in one process.

        With several processes the separate no-grad pass is used: the fused path runs every forward
        before any backward, which DDP's gradient reducer does not allow.
        """
        t = cfg.train
        return cls(temperature=cfg.rollout.temperature, token_budget=t.micro_batch_tokens,
                   grad_clip=cfg.optim.grad_clip, mini_batches=t.mini_batches, epochs=t.epochs,
                   by_length=t.sort_micro_batches, balance=t.balance_micro_batches,
                   norm_length=cfg.algo.loss_norm_length or cfg.rollout.max_response_tokens,
                   fused=t.fuse_on_policy and t.mini_batches == 1 and t.epochs == 1 and processes == 1)


def needs_entropy_grad(algo: stare.AlgoConfig) -> bool:
    """Whether the entropy must keep its graph: an entropy bonus is on (static or adaptive)."""
    return algo.entropy_coef > 0 or algo.entropy_adaptive


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
                  accelerator: Any, forward: Forward | None = None,
                  entropy_coef: float | None = None) -> dict[str, float]:
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
        entropy_coef: this step's entropy-bonus weight (the adaptive controller's); None = algo's.

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
    sums: dict[str, Tensor] = defaultdict(lambda: torch.zeros((), device=accelerator.device))
    counts: dict[str, int] = defaultdict(int)
    norms: list[Tensor] = []
    for _ in range(settings.epochs):
        for rows in mini_batches(batch.size, settings.mini_batches):
            for metrics in _backward_mini_batch(model, batch, rows, settings, algo, controller, accelerator,
                                                graphs, entropy_coef):
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


def _backward_mini_batch(model: nn.Module, batch: Batch, rows: list[int], settings: UpdateSettings,
                         algo: stare.AlgoConfig, controller: stare.Controller, accelerator: Any,
                         graphs: list[tuple[Tensor, Tensor]] | None,
                         entropy_coef: float | None) -> list[dict[str, Tensor]]:
    """Loss and backward of every micro-batch of one mini-batch; the metrics of its real micro-batches."""
    device = accelerator.device
    totals = global_totals(batch.loss_mask[rows], device)
    padded, groups = equal_micro_batches(batch, rows, settings.token_budget, by_length=settings.by_length,
                                         balance=settings.balance)
    out = []
    for index, group in enumerate(groups):
        mb = to_device(padded.select(group), device)
        with _maybe_no_sync(accelerator, model, index < len(groups) - 1):
            logp, entropy = graphs[index] if graphs else forward_logprobs(
                model, mb, settings.temperature, entropy_grad=needs_entropy_grad(algo))
            loss, metrics = micro_loss(logp, entropy, mb, algo, controller, totals, entropy_coef=entropy_coef,
                                       norm_length=settings.norm_length)
            accelerator.backward(loss * accelerator.num_processes)
        if group[0] < batch.size:     # a placeholder micro-batch has no tokens and no metrics
            out.append({key: value.detach() for key, value in metrics.items()})
    return out


def micro_loss(logp: Tensor, entropy: Tensor, mb: Batch, algo: stare.AlgoConfig, controller: stare.Controller,
               totals: dict[str, Tensor], *, entropy_coef: float | None = None,
               norm_length: int = 0) -> tuple[Tensor, dict[str, Tensor]]:
    """Loss of one micro-batch from its current log-probs (B, R) and entropy (B, R), plus metrics.

    The quadrant diagnostics of micro-batch scope come from here: the loss's own selection and the
    weights it applied (training.gate.diagnostics covers global scope).
    """
    weights, stats = micro_batch_weights(logp, mb, algo, controller)
    counts, scale = reduction(mb, algo, totals)
    counts["norm_length"] = norm_length or None
    loss, metrics = stare.algo_policy_loss(algo, logp, mb.old_log_probs, mb.advantages, mb.loss_mask,
                                           entropy=entropy, weights=weights, **counts)
    if algo.kl_coef > 0:
        kl = stare.aggregate(stare.kl_penalty(logp, mb.ref_log_probs, algo.kl_estimator), mb.loss_mask,
                             algo.loss_agg, **counts)
        loss = loss + algo.kl_coef * kl
        metrics["actor/kl_loss"] = kl.detach()
    coef = algo.entropy_coef if entropy_coef is None else entropy_coef
    if coef > 0:
        loss = loss - coef * stare.aggregate(entropy, mb.loss_mask, algo.loss_agg, **counts)
    metrics["actor/entropy"] = stare.masked_mean(entropy.detach(), mb.loss_mask)
    metrics.update(stats)
    if algo.stare.enabled and algo.stare.scope == "micro_batch":
        metrics.update(stare.quadrant_metrics(logp.detach(), mb.advantages, mb.loss_mask, entropy,
                                              top_ratio=algo.stare.top_ratio or 0.1, weights=weights))
    return loss * scale, metrics


def reduction(mb: Batch, algo: stare.AlgoConfig,
              totals: dict[str, Tensor]) -> tuple[dict[str, Any], Tensor | float]:
    r"""The counts `stare.aggregate` divides by, and the factor s on the micro-batch's loss.

        global      : counts = the mini-batch's N_tokens, N_seqs (all processes);        s = 1
        micro_batch : counts = the micro-batch's own;   s = n_seqs(micro-batch) / N_seqs(mini-batch)

    "micro_batch" is the authors' FSDP actor: a token mean per micro-batch, scaled by its share of
    the mini-batch's sequences, gradients averaged over processes; a token of a long-response
    micro-batch then weighs less than under the global token mean.
    """
    if algo.loss_agg_scope == "global":
        return dict(totals), 1.0
    rows = (mb.loss_mask.sum(-1) > 0).sum().to(totals["num_seqs"].dtype)
    return {}, rows / totals["num_seqs"].clamp(min=1)


def _clip(accelerator: Any, model: nn.Module, grad_clip: float) -> Tensor:
    if grad_clip > 0:
        return torch.as_tensor(accelerator.clip_grad_norm_(model.parameters(),
                                                           grad_clip)).detach().float().cpu()
    grads = [p.grad.detach().norm() for p in model.parameters() if p.grad is not None]
    return torch.stack(grads).norm().float().cpu() if grads else torch.zeros(())


def _maybe_no_sync(accelerator: Any, model: nn.Module, skip_sync: bool) -> contextlib.AbstractContextManager:
    """Skip the DDP gradient all-reduce on all but the last micro-batch of a mini-batch."""
    return accelerator.no_sync(model) if skip_sync else contextlib.nullcontext()

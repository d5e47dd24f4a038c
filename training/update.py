"""The policy update of one training step: mini-batches × epochs, token-budgeted micro-batches.

Per micro-batch:

    logp, H = forward(model, micro-batch)                               # (b, r) each, logp with grad
    ω       = stare.token_weights(logp.detach(), A, mask, gate/W/M from the controller)   (scope micro_batch)
              or the slice of ω computed once over the whole batch                        (scope global_batch)
    loss    = stare.policy_loss(logp, logp_old, A, mask, ω, agg, N_tokens/N_seqs of the mini-batch)
            + kl_coef · agg(KL(π‖π_ref))  - entropy_coef · agg(H)        (both off by default)
    backward

and one optimizer step per mini-batch (gradient clipping first). The global counts make the
micro-batch losses add up to the mini-batch loss exactly, whatever the micro-batch split.

With W data-parallel processes the counts are summed over processes (N = Σ_ranks N_r) and each
process back-propagates W · loss_r: DDP / FSDP / ZeRO average gradients over processes, so the
step's gradient is ∇ Σ_r loss_r = the token mean over the global mini-batch, exactly as in one
process holding every row.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor, nn

import stare
from training import distributed
from training.batch import Batch, equal_micro_batches, micro_batches, mini_batches
from training.logprobs import forward_logprobs, to_device
from training.rollout_engine import combine_weights


def stare_weights(log_probs: Tensor, batch: Batch, algo: stare.AlgoConfig,
                  controller: stare.Controller) -> tuple[Tensor | None, dict[str, Tensor]]:
    """ω and the STARE_SPEC §1.5 statistics for one population (a micro-batch or the whole batch).

    Returns (None, {}) when STARE is disabled (the reference returns no statistics then).
    """
    return _weights(log_probs.detach(), batch.advantages, batch.loss_mask, algo, controller)


def global_stare_weights(log_probs: Tensor, batch: Batch, algo: stare.AlgoConfig,
                         controller: stare.Controller) -> tuple[Tensor | None, dict[str, Tensor]]:
    """ω over the global batch (scope `global_batch`) when the rows are spread over processes.

    Every process's (B_r, R_r) log-probs, loss masks and (B_r,) advantages are gathered (rows in
    rank order, responses padded with mask 0, so padding is never a candidate), the top-P
    selection runs once over all of them, exactly as in one process (the selection is global
    across sequences, so the row order does not matter up to ties), and each process keeps its
    own rows. The statistics are the global selection's. Costs one all_gather of 3 · B · R floats.
    """
    if distributed.world_size() == 1 or not algo.stare.enabled:
        return stare_weights(log_probs, batch, algo, controller)
    rows, width = batch.loss_mask.shape
    logp = distributed.gather_rows(log_probs.detach().float())
    mask = distributed.gather_rows(batch.loss_mask.float())
    advantages = distributed.gather_rows(batch.advantages.float())
    weights, stats = _weights(logp, advantages, mask, algo, controller)
    start = distributed.row_offset(rows)
    return weights[start:start + rows, :width].contiguous(), stats


def _weights(log_probs: Tensor, advantages: Tensor, mask: Tensor, algo: stare.AlgoConfig,
             controller: stare.Controller) -> tuple[Tensor | None, dict[str, Tensor]]:
    cfg = algo.stare
    if not cfg.enabled:
        return None, {}
    return stare.token_weights_with_stats(
        log_probs, advantages, mask, variant=cfg.variant, top_ratio=cfg.top_ratio,
        w=controller.w, m=controller.m, gate_on=controller.gate_on, entropy=controller.entropy,
        target_entropy=controller.target_entropy)


def global_totals(mask: Tensor, device: torch.device | str) -> dict[str, Tensor]:
    """Token and sequence counts of a mini-batch over all processes (`num_tokens`, `num_seqs`).

    Args:
        mask: (B_r, R) loss mask of this process's rows of the mini-batch.
        device: where the loss is computed.
    """
    counts = torch.stack([mask.sum(), (mask.sum(-1) > 0).sum().to(mask.dtype)]).double()
    counts = distributed.all_sum(counts).to(torch.float32)
    return {"num_tokens": counts[0].to(device), "num_seqs": counts[1].to(device)}


def update_policy(model: nn.Module, optimizer: torch.optim.Optimizer, batch: Batch, *, algo: stare.AlgoConfig,
                  controller: stare.Controller, accelerator: Any, temperature: float, mini_batch_count: int,
                  epochs: int, token_budget: int, grad_clip: float,
                  by_length: bool = False) -> dict[str, float]:
    """Run the update of one step; returns metrics averaged over micro-batches (one sync at the end).

    Args:
        model: the prepared policy (train mode is set here).
        optimizer: the prepared optimizer.
        batch: the full batch with `old_log_probs` (and `ref_log_probs` when kl_coef > 0, `weights`
            when algo.stare.scope is global_batch).
        algo: the algorithm settings.
        controller: the STARE controller, already updated with this step's entropy.
        accelerator: the `accelerate.Accelerator` (backward, clipping, no_sync).
        temperature: rollout temperature.
        mini_batch_count: optimizer steps per epoch.
        epochs: passes over the batch.
        token_budget: padded tokens per micro-batch.
        grad_clip: max gradient norm (0 = off; the norm is still measured).
        by_length: group rows of similar length into micro-batches (`micro_batches`).

    Returns:
        `actor/*` and `stare/*` metrics as floats, plus `actor/grad_norm` (mean over optimizer steps).
    """
    if algo.kl_coef > 0 and batch.ref_log_probs is None:
        raise ValueError("algo.kl_coef > 0 needs reference log-probs; the trainer computes them when a "
                         "reference model exists")
    model.train()
    device = accelerator.device
    sums: dict[str, Tensor] = defaultdict(lambda: torch.zeros((), device=device))
    counts: dict[str, int] = defaultdict(int)
    norms: list[Tensor] = []
    for _ in range(epochs):
        for rows in mini_batches(batch.size, mini_batch_count):
            totals = global_totals(batch.loss_mask[rows], device)
            padded, groups = equal_micro_batches(batch, rows, token_budget, by_length=by_length)
            for is_last, group in _last_flag(groups):
                with _maybe_no_sync(accelerator, model, not is_last):
                    loss, metrics = _micro_step(model, to_device(padded.select(group), device), algo,
                                                controller, temperature, totals)
                    accelerator.backward(loss * accelerator.num_processes)
                if group[0] >= batch.size:     # a placeholder micro-batch: no tokens, no metrics
                    continue
                for key, value in metrics.items():
                    sums[key] = sums[key] + value.detach().float()
                    counts[key] += 1
            norms.append(_clip(accelerator, model, grad_clip))
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    out = {key: float(value) / counts[key] for key, value in sums.items()}
    out["actor/grad_norm"] = float(torch.stack(norms).float().mean()) if norms else 0.0
    out["actor/optimizer_steps"] = float(len(norms))
    return out


def _micro_step(model: nn.Module, mb: Batch, algo: stare.AlgoConfig, controller: stare.Controller,
                temperature: float, totals: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
    logp, entropy = forward_logprobs(model, mb, temperature, entropy_grad=algo.entropy_coef > 0)
    return micro_loss(logp, entropy, mb, algo, controller, totals)


def micro_loss(logp: Tensor, entropy: Tensor, mb: Batch, algo: stare.AlgoConfig, controller: stare.Controller,
               totals: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
    """Loss of one micro-batch from its current log-probs (B, R) and entropy (B, R), plus metrics."""
    if algo.stare.scope == "global_batch" and mb.weights is not None:
        weights, stats = mb.weights, {}
    else:
        weights, stats = stare_weights(logp, mb, algo, controller)
    weights = combine_weights(weights, mb.tis_weights)   # truncated importance sampling (rollout.tis_cap)
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


def fused_on_policy_update(model: nn.Module, optimizer: torch.optim.Optimizer, batch: Batch, *,
                           algo: stare.AlgoConfig, controller: stare.Controller, accelerator: Any,
                           temperature: float, token_budget: int, grad_clip: float,
                           before_loss: Callable[[Batch], Batch], by_length: bool = False
                           ) -> tuple[Batch, dict[str, float]]:
    """One on-policy update (1 mini-batch, 1 epoch) that reuses its forward pass as the old-log-prob pass.

    On-policy the reference sets logp_old = logp.detach() (ratio ≡ 1), so a separate no-grad pass
    only recomputes the same numbers. Here every micro-batch is forwarded once with grad (graphs
    kept), the full-batch (B, R) log-probs and entropy go to `before_loss` (H̄, controller update,
    global-scope ω, diagnostics: exactly what the separate pass feeds), and then the losses are
    built and back-propagated. Peak memory holds the activations of the whole batch.

    Returns:
        (the batch as `before_loss` returned it, update metrics as in `update_policy`).
    """
    model.train()
    device = accelerator.device
    groups = micro_batches(batch, range(batch.size), token_budget, by_length=by_length)
    forwards = []
    old = torch.zeros(batch.loss_mask.shape, dtype=torch.float32)
    ent = torch.zeros_like(old)
    for rows in groups:
        mb = to_device(batch.select(rows), device)
        logp, entropy = forward_logprobs(model, mb, temperature, entropy_grad=algo.entropy_coef > 0)
        old[rows, :logp.shape[1]] = logp.detach().float().cpu()
        ent[rows, :logp.shape[1]] = entropy.detach().float().cpu()
        forwards.append((rows, logp, entropy))
    batch = before_loss(batch.with_(old_log_probs=old, entropy=ent))
    totals = global_totals(batch.loss_mask, device)
    sums: dict[str, Tensor] = defaultdict(lambda: torch.zeros((), device=device))
    for is_last, (rows, logp, entropy) in _last_flag(forwards):
        mb = to_device(batch.select(rows), device)
        with _maybe_no_sync(accelerator, model, not is_last):
            loss, metrics = micro_loss(logp, entropy, mb, algo, controller, totals)
            accelerator.backward(loss * accelerator.num_processes)
        for key, value in metrics.items():
            sums[key] = sums[key] + value.detach().float()
    norm = _clip(accelerator, model, grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    out = {key: float(value) / len(forwards) for key, value in sums.items()}
    out.update({"actor/grad_norm": float(norm), "actor/optimizer_steps": 1.0})
    return batch, out


def _clip(accelerator: Any, model: nn.Module, grad_clip: float) -> Tensor:
    if grad_clip > 0:
        return torch.as_tensor(accelerator.clip_grad_norm_(model.parameters(),
                                                           grad_clip)).detach().float().cpu()
    grads = [p.grad.detach().norm() for p in model.parameters() if p.grad is not None]
    return torch.stack(grads).norm().float().cpu() if grads else torch.zeros(())


def _last_flag(items: list[Any]) -> Iterator[tuple[bool, Any]]:
    for i, item in enumerate(items):
        yield i == len(items) - 1, item


def _maybe_no_sync(accelerator: Any, model: nn.Module, skip_sync: bool) -> contextlib.AbstractContextManager:
    """Skip the DDP gradient all-reduce on all but the last micro-batch of a mini-batch."""
    return accelerator.no_sync(model) if skip_sync else contextlib.nullcontext()

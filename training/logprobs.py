"""Forward passes over a `Batch`: token log-probs and entropy of the response tokens (step stage 3).

Only the R + 1 last positions go through the LM head (`logits_to_keep`), so prompt positions cost
no vocabulary projection:

    logits (B, R + 1, V)  -> [:, :R] predicts response_ids (B, R)
    logp_t = log softmax(z_t / T)[id_t],  H_t = entropy of softmax(z_t / T)

`forward_pass` is the step's pass over the whole batch that gives the pre-update log-probs π_old
and entropy: a separate no-grad pass, or (fused, on-policy) the update's own forward with grad,
whose graphs the update then back-propagates (`training.update`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from stare.losses import token_logprobs_and_entropy
from training.batch import Batch, equal_micro_batches


def forward_logprobs(model: nn.Module, batch: Batch, temperature: float, *,
                     entropy_grad: bool = False) -> tuple[Tensor, Tensor]:
    """Log-probs and entropy of `batch.response_ids` under `model`.

    Args:
        model: a causal LM (HF interface: input_ids, attention_mask, position_ids, logits_to_keep).
        batch: the (micro-)batch.
        temperature: the rollout temperature.
        entropy_grad: keep the graph for the entropy (entropy bonus).

    Returns:
        (log_probs, entropy), each (B, R) float32; log_probs carries grad when grad is enabled.
    """
    width_r = batch.response_ids.shape[1]
    out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                position_ids=batch.position_ids, logits_to_keep=width_r + 1, use_cache=False)
    logits = out.logits[:, :width_r]                                          # (B, R, V)
    return token_logprobs_and_entropy(logits, batch.response_ids, temperature, entropy_grad=entropy_grad)


@dataclass(frozen=True)
class Forward:
    """The step's forward pass over the whole batch."""

    log_probs: Tensor
    """(B, R) float32 on CPU, no grad: log π_old of the response tokens (0 at padding)."""
    entropy: Tensor
    """(B, R) float32 on CPU, no grad: token entropy under π_old."""
    graphs: list[tuple[Tensor, Tensor]] | None = None
    """Fused pass only: per micro-batch (in `equal_micro_batches` order) the (b, r) log-probs and
    entropy with their autograd graphs, for the update to back-propagate; None after a no-grad pass."""


def forward_pass(model: nn.Module, batch: Batch, temperature: float, *, token_budget: int,
                 device: torch.device | str, by_length: bool, fused: bool,
                 entropy_grad: bool = False, balance: bool = False) -> Forward:
    """π_old and entropy of the whole batch: a no-grad pass (eval mode), or fused with the update.

    Fused (on-policy: one mini-batch, one epoch, one process), every micro-batch is forwarded once
    with grad in train mode and its graph kept: the reference sets logp_old = logp.detach()
    (ratio ≡ 1), so a separate pass would only recompute the same numbers. Peak memory then holds
    the activations of the whole batch. `balance` must match the update's micro-batching (the
    fused graphs are consumed group by group).
    """
    if not fused:
        model.eval()
        logp, ent = batch_logprobs(model, batch, temperature, token_budget=token_budget, device=device,
                                   by_length=by_length)
        return Forward(logp, ent)
    model.train()
    _, groups = equal_micro_batches(batch, range(batch.size), token_budget, by_length=by_length,
                                    balance=balance)
    old = torch.zeros(batch.loss_mask.shape, dtype=torch.float32)
    ent = torch.zeros_like(old)
    graphs = []
    for rows in groups:
        logp, entropy = forward_logprobs(model, to_device(batch.select(rows), device), temperature,
                                         entropy_grad=entropy_grad)
        old[rows, :logp.shape[1]] = logp.detach().float().cpu()
        ent[rows, :logp.shape[1]] = entropy.detach().float().cpu()
        graphs.append((logp, entropy))
    return Forward(old, ent, graphs)


def batch_logprobs(model: nn.Module, batch: Batch, temperature: float, *, token_budget: int,
                   device: torch.device | str = "cpu", by_length: bool = False) -> tuple[Tensor, Tensor]:
    """No-grad log-probs and entropy for the whole batch, micro-batch by micro-batch.

    Args:
        model: the policy (or reference) model.
        batch: the full batch (on CPU).
        temperature: the rollout temperature.
        token_budget: padded tokens per forward pass.
        device: where to run.
        by_length: group rows of similar length (less padding; same results).

    Returns:
        (log_probs, entropy), each (B, R) float32 on CPU, zero at padding columns of short rows.
    """
    width_r = batch.response_ids.shape[1]
    logp = torch.zeros((batch.size, width_r), dtype=torch.float32)
    ent = torch.zeros_like(logp)
    padded, groups = equal_micro_batches(batch, range(batch.size), token_budget, by_length=by_length)
    for rows in groups:
        if rows[0] >= batch.size:   # placeholder micro-batch: keeps data-parallel forwards in step
            with torch.inference_mode():
                forward_logprobs(model, to_device(padded.select(rows), device), temperature)
            continue
        mb = to_device(batch.select(rows), device)
        with torch.inference_mode():   # outputs are copied into normal tensors (safe to use under autograd)
            mb_logp, mb_ent = forward_logprobs(model, mb, temperature)
        width = mb_logp.shape[1]
        logp[rows, :width] = mb_logp.float().cpu()
        ent[rows, :width] = mb_ent.float().cpu()
    return logp, ent


def to_device(batch: Batch, device: torch.device | str) -> Batch:
    """Move every tensor of the batch to `device` (a no-op on CPU)."""
    if torch.device(device).type == "cpu":
        return batch
    moved = {name: value.to(device) for name, value in vars(batch).items() if isinstance(value, Tensor)}
    return batch.with_(**moved)

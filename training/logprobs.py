"""Forward passes over a `Batch`: token log-probs and entropy of the response tokens.

Only the R + 1 last positions go through the LM head (`logits_to_keep`), so prompt positions cost
no vocabulary projection:

    logits (B, R + 1, V)  -> [:, :R] predicts response_ids (B, R)
    logp_t = log softmax(z_t / T)[id_t],  H_t = entropy of softmax(z_t / T)
"""

from __future__ import annotations

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


def masked_token_mean(values: Tensor, mask: Tensor) -> float:
    """sum(values·mask) / sum(mask) as a float (NaN when the mask is empty)."""
    total = float(mask.sum())
    return float((values * mask).sum()) / total if total > 0 else float("nan")


def per_turn_means(values: Tensor, mask: Tensor, turn_index: Tensor, *, max_turns: int) -> dict[int, float]:
    """Token mean of `values` over mask tokens of each assistant turn k (vectorised).

    Args:
        values: (B, R) per-token values (e.g. entropy).
        mask: (B, R) loss mask.
        turn_index: (B, R) turn of each token (-1 on padding).
        max_turns: turns reported (0..max_turns-1).

    Returns:
        {k: mean} for turns that have at least one mask token.
    """
    valid = (mask > 0) & (turn_index >= 0) & (turn_index < max_turns)
    idx = turn_index[valid]
    sums = torch.zeros(max_turns, dtype=torch.float64).index_add_(0, idx, values[valid].double())
    counts = torch.bincount(idx, minlength=max_turns)
    return {k: float(sums[k] / counts[k]) for k in range(max_turns) if counts[k] > 0}

"""The entropy gate (step stage 4) and the step's diagnostics of the pre-update policy.

    H̄ = Σ_t H_t · mask_t / Σ_t mask_t     over the loss-mask tokens of the whole batch (all processes)

The mask is the trajectories' loss mask (tool output and template glue excluded): the gate's input
exactly as the reference defines it. `controller.update(H̄)` then switches STARE's gate and steers
W / M towards the target entropy (STARE_SPEC §1.4).
"""

from __future__ import annotations

import torch
from torch import Tensor

import stare
from training import distributed
from training.batch import Batch


def entropy_gate(controller: stare.Controller, batch: Batch, *, feed: bool = True,
                 bonus: stare.EntropyCoefController | None = None) -> float:
    """H̄ of the batch (`batch.entropy`, (B, R), under the loss mask); updates the controllers; returns H̄.

    NaN when no process holds a loss-mask token. With `feed=False` (a step that keeps no group and
    trains nothing, so its batch holds every episode rather than the kept ones) H̄ is only measured:
    the gate keeps its state, as it would in the authors' trainer, which never has such a step.
    `bonus`, the adaptive entropy-bonus controller, is fed the same H̄.
    """
    mask = batch.loss_mask
    totals = distributed.all_sum(torch.stack([(batch.entropy * mask).sum(), mask.sum()]).double())
    h_bar = float(totals[0] / totals[1]) if float(totals[1]) > 0 else float("nan")
    if feed:
        controller.update(h_bar)
        if bonus is not None:
            bonus.update(h_bar)
    return h_bar


def diagnostics(batch: Batch, algo: stare.AlgoConfig, h_bar: float, *, max_turns: int) -> dict[str, float]:
    """Metrics of the pre-update policy on this batch.

    `train/entropy` = H̄, `rollout/*` the rollout/trainer mismatch (`stare.logprob_mismatch`, when the
    engine returned log-probs), `train/entropy_turn<k>` the per-turn H̄, `quadrant/*` (sign of A ×
    high/low entropy, `stare.quadrant_metrics`, with the global-scope ω when computed) and
    `train/trained_tokens` (loss-mask tokens per row).
    """
    old_logp, entropy, mask = batch.old_log_probs, batch.entropy, batch.loss_mask
    out: dict[str, float] = {"train/entropy": h_bar}
    if batch.rollout_log_probs is not None:   # rollout engine vs trainer, loss-mask tokens (docs/vllm.md)
        out.update(stare.logprob_mismatch(old_logp, batch.rollout_log_probs, mask,
                                          reduce=distributed.all_sum))
    for turn, value in per_turn_means(entropy, mask, batch.turn_index, max_turns=max_turns).items():
        out[f"train/entropy_turn{turn}"] = value
    quadrants = stare.quadrant_metrics(old_logp, batch.advantages, mask, entropy,
                                       top_ratio=algo.stare.top_ratio or 0.1, weights=batch.weights)
    out.update({key: float(value) for key, value in quadrants.items()})
    out["train/trained_tokens"] = float(mask.sum()) / max(1, batch.size)
    return out


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

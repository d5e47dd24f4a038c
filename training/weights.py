"""The step's token weights (stage 5): STARE ω at micro- or global-batch scope, and TIS.

    ω_t   = stare.token_weights(logp_old, A, mask, gate/W/M of the controller)     (STARE_SPEC §1.5)
    w_t   = min(π_old,t / μ_t, C)                            (stare.offpolicy.tis_weights, C = tis_cap)
    loss weight per token = ω_t · w_t                        (stare.offpolicy.combine_weights)

Scope `micro_batch` (the reference) computes ω inside the update, per micro-batch, from the
current log-probs; scope `global_batch` computes it once here, over the whole batch of every
process, and the update reads the slice of each micro-batch.
"""

from __future__ import annotations

from torch import Tensor

import stare
from training import distributed
from training.batch import Batch


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


def batch_weights(batch: Batch, algo: stare.AlgoConfig, controller: stare.Controller, *,
                  tis_cap: float) -> tuple[Batch, dict[str, float]]:
    """The weights computed once over the whole batch, before the update.

    `batch` carries `old_log_probs` (and `rollout_log_probs` when the engine returned them). Sets
    `tis_weights` (tis_cap > 0 and rollout log-probs present) and, for scope `global_batch`,
    `weights` = ω; returns the global selection's statistics (empty otherwise).
    """
    if batch.rollout_log_probs is not None and tis_cap > 0:
        tis = stare.tis_weights(batch.old_log_probs, batch.rollout_log_probs, tis_cap)
        batch = batch.with_(tis_weights=tis)
    if algo.stare.scope != "global_batch":
        return batch, {}
    weights, stats = global_stare_weights(batch.old_log_probs, batch, algo, controller)
    return batch.with_(weights=weights), {key: float(value) for key, value in stats.items()}


def micro_batch_weights(logp: Tensor, mb: Batch, algo: stare.AlgoConfig,
                        controller: stare.Controller) -> tuple[Tensor | None, dict[str, Tensor]]:
    """The loss weights ω · w_TIS of one micro-batch (ω from `mb.weights` at global scope)."""
    if algo.stare.scope == "global_batch" and mb.weights is not None:
        weights, stats = mb.weights, {}
    else:
        weights, stats = stare_weights(logp, mb, algo, controller)
    return stare.combine_weights(weights, mb.tis_weights), stats


def _weights(log_probs: Tensor, advantages: Tensor, mask: Tensor, algo: stare.AlgoConfig,
             controller: stare.Controller) -> tuple[Tensor | None, dict[str, Tensor]]:
    cfg = algo.stare
    if not cfg.enabled:
        return None, {}
    return stare.token_weights_with_stats(
        log_probs, advantages, mask, variant=cfg.variant, top_ratio=cfg.top_ratio,
        w=controller.w, m=controller.m, gate_on=controller.gate_on, entropy=controller.entropy,
        target_entropy=controller.target_entropy)



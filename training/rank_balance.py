"""Rows redistributed over data-parallel processes to hold about equal real tokens (verl's balance_batch).

    owners = longest rows first, each to the process with the fewest real tokens so far, at most
             ⌈N / W⌉ rows per process                         (every process computes the same plan)

Each process plays and scores whole groups, so after the advantages are computed a process may
hold many long answers while another holds short ones. The authors rebalance the batch across
GPUs before the update (`trainer.balance_batch`); with `train.balance_micro_batches` this module
does the same here, then `training.batch.balanced_micro_batches` balances inside each process.
With a global token mean and `global_batch` STARE scope the result does not depend on where a row
lands; with `micro_batch` scope it decides, as in the authors' runs, who competes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from training import distributed
from training.batch import Batch


def balanced_owners(lengths: Sequence[int], world: int) -> list[int]:
    """Process of each row: longest first, to the least-loaded process with room (⌈N / W⌉ rows each).

    Args:
        lengths: real tokens of each row of the global batch.
        world: number of processes W.

    Returns:
        Owner rank of each row, in row order.
    """
    cap = -(-len(lengths) // world)
    loads, counts, owners = [0] * world, [0] * world, [0] * len(lengths)
    for row in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        rank = min((r for r in range(world) if counts[r] < cap), key=lambda r: (loads[r], r))
        owners[row], loads[rank], counts[rank] = rank, loads[rank] + lengths[row], counts[rank] + 1
    return owners


def balance_across_processes(batch: Batch, *, enabled: bool = True) -> Batch:
    """This process's rows of the balanced global batch (the batch itself in one process or when off).

    Gathers the batch's input fields from every process (prompts stay left-padded, responses
    right-padded; one all_gather each) and keeps the rows `balanced_owners` gives this process.
    Call it before any pass over the batch: the per-row fields filled later are not exchanged.
    Skipped when there are fewer rows than processes.
    """
    world = distributed.world_size()
    if not enabled or world == 1:
        return batch
    lengths = distributed.gather_rows(batch.attention_mask.sum(-1)).tolist()
    if len(lengths) < world:
        return batch
    width = batch.prompt_width

    def joined(value: Tensor) -> Tensor:      # prompts left-padded: flip, right-pad on gather, flip back
        prompt = distributed.gather_rows(value[:, :width].flip(-1)).flip(-1)
        return torch.cat([prompt, distributed.gather_rows(value[:, width:])], dim=-1)

    input_ids, response_ids = joined(batch.input_ids), distributed.gather_rows(batch.response_ids)
    rollout = batch.rollout_log_probs
    full = Batch(input_ids=input_ids, attention_mask=joined(batch.attention_mask), response_ids=response_ids,
                 loss_mask=distributed.gather_rows(batch.loss_mask),
                 turn_index=distributed.gather_rows(batch.turn_index, pad=-1),
                 advantages=distributed.gather_rows(batch.advantages),
                 prompt_width=input_ids.shape[1] - response_ids.shape[1],
                 rollout_log_probs=None if rollout is None else distributed.gather_rows(rollout))
    mine = [row for row, owner in enumerate(balanced_owners(lengths, world)) if owner == distributed.rank()]
    return full.select(mine)

"""Trajectories -> padded tensors, and token-budgeted micro-batches.

Layout of one row (prompt left-padded to P, response right-padded to R):

    [pad .. pad  prompt ids | response ids  pad .. pad]      input_ids      (B, P + R)
                              loss_mask (from the trajectory, never from attention)  (B, R)

`loss_mask` is copied from `Trajectory.loss_mask` (1 = sampled by the policy, 0 = tool output and
template glue). The attention mask only says which positions are real tokens; it is never used to
decide what is trained (the reference's multi-turn bug, STARE_SPEC §5).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

import torch
from torch import Tensor

from agents.trajectory import Trajectory
from training import distributed


@dataclass(frozen=True)
class Batch:
    """A padded training batch. Optional fields are filled by later stages of the step."""

    input_ids: Tensor
    """(B, P + R) long: left-padded prompt then right-padded response."""
    attention_mask: Tensor
    """(B, P + R) long: 1 on real tokens (prompt and response, including injected tool tokens)."""
    response_ids: Tensor
    """(B, R) long: the response part of `input_ids`."""
    loss_mask: Tensor
    """(B, R) float32: 1 on tokens the policy sampled and that are trained, from `Trajectory.loss_mask`."""
    turn_index: Tensor
    """(B, R) long: assistant turn of each response token, -1 on padding."""
    advantages: Tensor
    """(B,) float32 GRPO advantage per sequence."""
    prompt_width: int
    """P, the padded prompt width."""
    old_log_probs: Tensor | None = None
    """(B, R) float32 log-probs under the pre-update policy (old-log-prob pass)."""
    entropy: Tensor | None = None
    """(B, R) float32 token entropy under the pre-update policy."""
    ref_log_probs: Tensor | None = None
    """(B, R) float32 log-probs under the reference model (only with a KL term)."""
    rollout_log_probs: Tensor | None = None
    """(B, R) float32 log-probs of the rollout engine (`Trajectory.logprobs`; 0 on injected tokens)."""
    tis_weights: Tensor | None = None
    """(B, R) truncated importance weights min(π_old/π_rollout, C) multiplied into the loss (tis_cap > 0)."""
    weights: Tensor | None = None
    """(B, R) STARE ω precomputed over the whole batch (weight_scope=global_batch)."""

    @property
    def size(self) -> int:
        """Number of rows B."""
        return int(self.input_ids.shape[0])

    @property
    def position_ids(self) -> Tensor:
        """(B, P + R) positions counted over real tokens only: cumsum(attention) - 1, clamped at 0."""
        return (self.attention_mask.cumsum(-1) - 1).clamp(min=0)

    def select(self, rows: Tensor | Sequence[int]) -> Batch:
        """Rows `rows`, with the columns that are padding in all of them trimmed away."""
        rows = torch.as_tensor(rows, dtype=torch.long)
        prompt_real = self.attention_mask[rows, : self.prompt_width]
        left = int((prompt_real.cumsum(-1) == 0).sum(-1).min()) if rows.numel() else 0
        resp_real = self.attention_mask[rows, self.prompt_width:]
        right = int(resp_real.sum(-1).max()) if rows.numel() else 0
        cols = slice(left, self.prompt_width + right)
        picked = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, Tensor):
                continue
            value = value[rows]
            if value.dim() == 2:
                value = value[:, cols] if value.shape[1] == self.attention_mask.shape[1] else value[:, :right]
            picked[f.name] = value
        return replace(self, prompt_width=self.prompt_width - left, **picked)

    def with_(self, **tensors: Tensor | None) -> Batch:
        """A copy with some fields replaced."""
        return replace(self, **tensors)


def collate(trajectories: Sequence[Trajectory], advantages: Tensor, *, pad_id: int) -> Batch:
    """Pad trajectories into a `Batch` (prompt left-padded, response right-padded, batch max only).

    Args:
        trajectories: B episodes.
        advantages: (B,) per-sequence advantages.
        pad_id: token id for padding positions (never attended to, never trained).

    Returns:
        The padded batch on CPU.
    """
    if not trajectories:
        raise ValueError("collate needs at least one trajectory")
    width_p = max(len(t.prompt_ids) for t in trajectories)
    width_r = max(1, max(len(t.response_ids) for t in trajectories))
    b = len(trajectories)
    ids = torch.full((b, width_p + width_r), pad_id, dtype=torch.long)
    attn = torch.zeros((b, width_p + width_r), dtype=torch.long)
    mask = torch.zeros((b, width_r), dtype=torch.float32)
    turns = torch.full((b, width_r), -1, dtype=torch.long)
    for i, traj in enumerate(trajectories):
        p, r = len(traj.prompt_ids), len(traj.response_ids)
        _check_lengths(traj, i)
        ids[i, width_p - p: width_p + r] = torch.tensor(traj.prompt_ids + traj.response_ids, dtype=torch.long)
        attn[i, width_p - p: width_p + r] = 1
        if r:
            mask[i, :r] = torch.tensor(traj.loss_mask, dtype=torch.float32)
            turns[i, :r] = torch.tensor(traj.turn_index or [0] * r, dtype=torch.long)
    rollout = None   # scripted trajectories may carry no log-probs
    if all(len(t.logprobs) == len(t.response_ids) for t in trajectories):
        rollout = rollout_log_probs(trajectories, width_r)
    return Batch(input_ids=ids, attention_mask=attn, response_ids=ids[:, width_p:], loss_mask=mask,
                 turn_index=turns, advantages=advantages.float(), prompt_width=width_p,
                 rollout_log_probs=rollout)


def rollout_log_probs(trajectories: Sequence[Trajectory], width: int) -> Tensor:
    """The rollout log-probs μ of a batch, laid out as `Batch.loss_mask`.

    Args:
        trajectories: B episodes with `logprobs` (one per response token, 0.0 at injected ones).
        width: R, the padded response width of the batch.

    Returns:
        (B, R) float32, right-padded with 0.0.
    """
    out = torch.zeros((len(trajectories), width), dtype=torch.float32)
    for row, traj in enumerate(trajectories):
        values = list(traj.logprobs)
        if len(values) != len(traj.response_ids):
            raise ValueError(f"trajectory {row} has {len(values)} rollout log-probs for "
                             f"{len(traj.response_ids)} response tokens; they must match")
        if values:
            out[row, :len(values)] = torch.tensor(values, dtype=torch.float32)
    return out


def _check_lengths(traj: Trajectory, row: int) -> None:
    r = len(traj.response_ids)
    if len(traj.loss_mask) != r or (traj.turn_index and len(traj.turn_index) != r):
        raise ValueError(f"trajectory {row} ({traj.task_id!r}): loss_mask has {len(traj.loss_mask)} entries "
                         "and "
                         f"turn_index {len(traj.turn_index)} for {r} response tokens; they must match")


def placeholder_rows(batch: Batch, rows: int) -> Batch:
    """`batch` grown to at least `rows` rows by copies of its first row with loss mask 0, advantage 0.

    A placeholder row is forwarded and back-propagated like any other but contributes no token to
    the loss, the entropy or any count; a data-parallel process that has too few (or no) kept rows
    uses them to take part in the same collectives and optimizer steps as the others.
    """
    if batch.size >= rows:
        return batch
    extra = rows - batch.size
    index = torch.cat([torch.arange(batch.size), torch.zeros(extra, dtype=torch.long)])
    grown = {f.name: getattr(batch, f.name)[index] for f in fields(batch)
             if isinstance(getattr(batch, f.name), Tensor)}
    blank = torch.arange(index.numel()) >= batch.size
    grown["loss_mask"] = grown["loss_mask"].masked_fill(blank[:, None], 0.0)
    grown["advantages"] = grown["advantages"].masked_fill(blank, 0.0)
    grown["response_ids"] = grown["input_ids"][:, batch.prompt_width:]
    return replace(batch, **grown)


def micro_batches(batch: Batch, rows: Sequence[int], token_budget: int, *,
                  by_length: bool = False, balance: bool = False) -> list[list[int]]:
    """Split `rows` into groups whose padded size fits `token_budget`.

    A group's padded size is len(group) × max real length in it (prompt + response); rows are added
    greedily while that stays within the budget. A single row longer than the budget forms its own
    micro-batch.

    Args:
        batch: the padded batch.
        rows: row indices, in the order to train them.
        token_budget: max padded tokens per micro-batch.
        by_length: visit rows shortest first (stable), so each micro-batch holds rows of similar
            length and little padding. The loss is unchanged (global token counts); STARE's
            micro-batch population changes with the grouping, as it does with the reference's layout.
        balance: `balanced_micro_batches` instead (real-token balancing, the authors' layout).

    Returns:
        Lists of row indices.
    """
    lengths = batch.attention_mask.sum(-1).tolist()
    if balance:
        return balanced_micro_batches([int(lengths[row]) for row in rows], list(rows), token_budget)
    if by_length:
        rows = sorted(rows, key=lambda row: lengths[row])
    groups: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for row in rows:
        length = int(lengths[row])
        if current and (len(current) + 1) * max(longest, length) > token_budget:
            groups.append(current)
            current, longest = [], 0
        current.append(int(row))
        longest = max(longest, length)
    if current:
        groups.append(current)
    return groups


def balanced_micro_batches(lengths: Sequence[int], rows: Sequence[int], token_budget: int) -> list[list[int]]:
    r"""Micro-batches balanced by real tokens (verl's dynamic batch size with balanced partitions).

        m      = ceil(Σ_i len_i / token_budget)            (the fewest micro-batches the real tokens need)
        groups = longest rows first, each to the group holding the fewest real tokens so far (LPT)

    then m grows by one until every group's padded size (rows × longest row) fits the budget (or each
    row is alone). Unlike row order, answers to one prompt spread over micro-batches, and every
    micro-batch carries about the same number of real tokens, so STARE's per-micro-batch top-P
    contest has the population the authors' layout gives it.

    Args:
        lengths: real tokens (prompt + response) of each row, in the order of `rows`.
        rows: row indices.
        token_budget: max padded tokens per micro-batch.

    Returns:
        Lists of row indices, each in ascending order, ordered by their first row.
    """
    if not rows:
        return []
    count = max(1, -(-sum(lengths) // token_budget))
    order = sorted(range(len(rows)), key=lambda i: (-lengths[i], i))
    while True:
        groups: list[list[int]] = [[] for _ in range(count)]
        loads = [0] * count
        for i in order:
            target = min(range(count), key=lambda g: (loads[g], g))
            groups[target].append(i)
            loads[target] += lengths[i]
        fits = all(len(g) * max(lengths[i] for i in g) <= token_budget for g in groups if len(g) > 1)
        if fits or count >= len(rows):
            break
        count += 1
    out = [sorted(int(rows[i]) for i in group) for group in groups if group]
    return sorted(out, key=lambda group: group[0])


def equal_micro_batches(batch: Batch, rows: Sequence[int], token_budget: int, *,
                        by_length: bool = False, balance: bool = False) -> tuple[Batch, list[list[int]]]:
    """`micro_batches`, padded so every data-parallel process runs the same number of them.

    DDP (buffer broadcast), FSDP and ZeRO-3 (parameter all-gathers) run collectives inside every
    forward pass, so all processes must run as many forward passes: a process with fewer
    micro-batches than the maximum over processes (what verl does too) gets extra micro-batches of
    one placeholder row (loss mask 0: no token, no gradient), appended to the returned batch.
    In one process this is `micro_batches` and `batch` unchanged.

    Returns:
        (the batch, possibly with one placeholder row appended at index `batch.size`, the groups).
    """
    groups = micro_batches(batch, rows, token_budget, by_length=by_length, balance=balance)
    target = distributed.all_max(len(groups))
    if target == len(groups):
        return batch, groups
    spare = batch.size
    return placeholder_rows(batch, spare + 1), groups + [[spare] for _ in range(target - len(groups))]


def mini_batches(size: int, count: int) -> list[list[int]]:
    """Split rows 0..size-1 into `count` contiguous near-equal chunks (verl splits in order, unshuffled)."""
    if count < 1:
        raise ValueError(f"train.mini_batches must be >= 1, got {count}")
    count = min(count, size)
    bounds = [round(i * size / count) for i in range(count + 1)]
    return [list(range(bounds[i], bounds[i + 1])) for i in range(count) if bounds[i + 1] > bounds[i]]

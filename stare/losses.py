"""Dual-clip PPO surrogate with clip-higher (verl's GRPO/DAPO loss), ω, reduction, and log-prob helpers."""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

Aggregation = Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
AGGREGATIONS: tuple[str, ...] = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean",
                                 "seq-mean-token-sum-norm")


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """sum(values·mask) / max(1, sum(mask)), a 0-dim tensor (no host sync)."""
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1)


def aggregate(loss_mat: Tensor, mask: Tensor, mode: str = "token-mean", *,
              num_tokens: float | Tensor | None = None, num_seqs: float | Tensor | None = None,
              norm_length: int | None = None) -> Tensor:
    r"""Reduce a (B, T) per-token loss to a scalar.

        token-mean              : Σ_it l_it·mask_it / N,  N = num_tokens if given, else max(1, Σ mask)
        seq-mean-token-sum      : mean over sequences of Σ_t l_it·mask_it
        seq-mean-token-mean     : mean over sequences of (Σ_t l_it·mask_it / Σ_t mask_it)  (original GRPO)
        seq-mean-token-sum-norm : Σ_it l_it·mask_it / (S · L)       (Dr. GRPO's constant normaliser)

    The first two sequence modes average over sequences with at least one active token, or divide
    by `num_seqs` when given. `seq-mean-token-sum-norm` divides by S = num_seqs (default: all B rows,
    as TRL's `dr_grpo` and verl's `seq-mean-token-sum-norm` times its micro-batch share) and by a
    constant length L = norm_length (default T; set it to the response budget so it never varies).
    Pass the global counts when a batch is split into micro-batches whose gradients are summed: then
    the micro-batch losses add up to the full-batch loss exactly.

    Args:
        loss_mat: (B, T) per-token loss.
        mask: (B, T) 1 on trained tokens.
        mode: one of `AGGREGATIONS`.
        num_tokens: global active-token count for token-mean (a number or 0-dim tensor).
        num_seqs: global sequence count for the sequence modes.
        norm_length: L of `seq-mean-token-sum-norm` (the response-length budget); default T.

    Returns:
        0-dim loss.
    """
    mask = mask.to(loss_mat.dtype)
    masked = loss_mat * mask
    if mode == "token-mean":
        denom = mask.sum().clamp(min=1) if num_tokens is None else num_tokens
        return masked.sum() / denom
    if mode == "seq-mean-token-sum-norm":
        rows = loss_mat.shape[0] if num_seqs is None else num_seqs
        length = loss_mat.shape[-1] if norm_length is None else norm_length
        if isinstance(length, int) and length <= 0:
            raise ValueError(f"norm_length must be > 0 (the response-length budget), got {length}")
        return masked.sum() / (rows * length)
    if mode not in AGGREGATIONS:
        raise ValueError(f"agg must be one of {AGGREGATIONS}, got {mode!r}")
    tokens = mask.sum(-1)                                                   # (B,)
    seq = masked.sum(-1)                                                    # (B,)
    if mode == "seq-mean-token-mean":
        seq = seq / tokens.clamp(min=1)
    has_tokens = (tokens > 0).to(loss_mat.dtype)
    denom = has_tokens.sum().clamp(min=1) if num_seqs is None else num_seqs
    return (seq * has_tokens).sum() / denom


def clipped_surrogate(log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor, mask: Tensor, *,
                      clip_low: float = 0.2, clip_high: float = 0.28, clip_c: float = 10.0
                      ) -> tuple[Tensor, dict[str, Tensor]]:
    r"""Per-token dual-clip PPO loss with decoupled clip bounds (verl `compute_policy_loss`), unreduced.

        Δ      = clamp(logp - logp_old, -20, 20);    r = exp(Δ)
        l1     = -A·r;   l2 = -A·clip(r, 1 - ε_low, 1 + ε_high);   lclip = max(l1, l2)
        l3     = -A·c;   l     = min(l3, lclip) if A < 0 else lclip          (dual clip)

    Metrics (masked means): `actor/pg_clipfrac` = frac(l2 > l1), `actor/pg_clipfrac_lower` =
    frac(lclip > l3 and A < 0), `actor/ppo_kl` = mean(-Δ).

    Args:
        log_probs: (B, T) current-policy log-probs (with grad).
        old_log_probs: (B, T) log-probs under the policy that sampled the tokens.
        advantages: (B,) per sequence or (B, T) per token.
        mask: (B, T) 1 on trained tokens.
        clip_low: ε_low, lower clip 1 - ε_low of the ratio.
        clip_high: ε_high, upper clip 1 + ε_high (clip-higher when > ε_low).
        clip_c: dual-clip constant c > 1.

    Returns:
        ((B, T) loss, detached 0-dim metrics).
    """
    if clip_c <= 1.0:
        raise ValueError(f"clip_c must be > 1 for the dual clip (verl's clip_ratio_c), got {clip_c}")
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages   # (B, 1) or (B, T)
    delta = (log_probs - old_log_probs).clamp(-20.0, 20.0)                    # (B, T)
    ratio = delta.exp()
    l1 = -adv * ratio
    l2 = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    lclip = torch.maximum(l1, l2)
    l3 = -adv * clip_c
    negative = (adv < 0).expand_as(lclip)
    loss = torch.where(negative, torch.minimum(l3, lclip), lclip)             # (B, T)
    with torch.no_grad():
        metrics = {"actor/pg_clipfrac": masked_mean((l2 > l1).float(), mask),
                   "actor/ppo_kl": masked_mean(-delta, mask),
                   "actor/pg_clipfrac_lower": masked_mean(((lclip > l3) & negative).float(), mask)}
    return loss, metrics


def policy_loss(log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor, mask: Tensor, *,
                clip_low: float = 0.2, clip_high: float = 0.28, clip_c: float = 10.0,
                weights: Tensor | None = None, agg: str = "token-mean",
                num_tokens: float | Tensor | None = None, num_seqs: float | Tensor | None = None,
                norm_length: int | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    r"""GRPO/DAPO/STARE policy loss: `clipped_surrogate`, times ω, then `aggregate`.

        loss = aggregate(ω ⊙ l_dualclip, mask, agg)

    ω (STARE's `token_weights`) multiplies the *clipped* per-token loss after the dual clip and before
    aggregation (never the advantage before clipping), and is not renormalised. The clip metrics are
    measured before weighting. With ω ≡ 1 (or `weights=None`) this is exactly GRPO's loss.

    Args:
        log_probs: (B, T) current-policy log-probs (with grad).
        old_log_probs: (B, T) behaviour-policy log-probs (equal to `log_probs.detach()` on-policy).
        advantages: (B,) per-sequence advantages, broadcast over T, or (B, T) per-token advantages
            (the reference passes (B, T) with padding zeroed; either gives the same loss).
        mask: (B, T) 1 on trained tokens (0 on prompt, tool output, padding).
        clip_low: ε_low (see `clipped_surrogate`).
        clip_high: ε_high.
        clip_c: dual-clip constant c > 1.
        weights: (B, T) ω, or None for all ones.
        agg: one of `AGGREGATIONS`.
        num_tokens: global active-token count for token-mean (micro-batching; see `aggregate`).
        num_seqs: global sequence count for the sequence modes.
        norm_length: constant length L of `seq-mean-token-sum-norm` (Dr. GRPO).

    Returns:
        (loss, metrics): 0-dim loss with grad; metrics `actor/pg_loss`, `actor/pg_clipfrac`,
        `actor/ppo_kl`, `actor/pg_clipfrac_lower` as detached 0-dim tensors (no host sync).
    """
    if agg not in AGGREGATIONS:
        raise ValueError(f"agg must be one of {AGGREGATIONS}, got {agg!r}")
    loss_mat, metrics = clipped_surrogate(log_probs, old_log_probs, advantages, mask,
                                          clip_low=clip_low, clip_high=clip_high, clip_c=clip_c)
    if weights is not None:
        loss_mat = loss_mat * weights
    loss = aggregate(loss_mat, mask, agg, num_tokens=num_tokens, num_seqs=num_seqs, norm_length=norm_length)
    metrics["actor/pg_loss"] = loss.detach()
    return loss, metrics


def entropy_bonus(entropy: Tensor, mask: Tensor, *, coef: float = 0.0, agg: str = "token-mean",
                  num_tokens: float | Tensor | None = None) -> Tensor:
    r"""Entropy-bonus term to *add* to the policy loss: -coef · aggregate(H, mask, agg). Off (0) by default.

    Args:
        entropy: (B, T) per-token entropy computed with grad (`token_logprobs_and_entropy(...,
            entropy_grad=True)`).
        mask: (B, T) 1 on trained tokens.
        coef: bonus weight (verl's `entropy_coeff`); 0 returns a zero that keeps no graph.
        agg: reduction, as in `aggregate`.
        num_tokens: global token count for token-mean.

    Returns:
        0-dim tensor.
    """
    if coef == 0.0:
        return entropy.new_zeros(()).detach()
    return -coef * aggregate(entropy, mask, agg, num_tokens=num_tokens)


def kl_penalty(log_probs: Tensor, ref_log_probs: Tensor, kind: str = "k3") -> Tensor:
    r"""Per-token KL(π‖π_ref) estimate from sampled tokens, (B, T).

    k1 = logp - logp_ref
    k3 = exp(logp_ref - logp) - (logp_ref - logp) - 1, clamped to [-10, 10] (verl `low_var_kl`)
    """
    if kind == "k1":
        return log_probs - ref_log_probs
    if kind == "k3":
        diff = (ref_log_probs - log_probs).clamp(-20.0, 20.0)
        return (diff.exp() - diff - 1.0).clamp(-10.0, 10.0)
    raise ValueError(f"kind must be 'k1' or 'k3', got {kind!r}")


def token_logprobs_and_entropy(logits: Tensor, ids: Tensor, temperature: float = 1.0, *,
                               chunk_rows: int = 1024, entropy_grad: bool = False) -> tuple[Tensor, Tensor]:
    r"""Log-probs of the sampled ids and the token entropy, from (B, T, V) logits.

        z = logits / temperature;   logp_t = z_t[id_t] - logsumexp(z_t);   H_t = logsumexp(z_t) - Σ_v p_v z_v

    Works on chunks of `chunk_rows` positions, upcast to float32, so the float32 copy of the
    logits never exceeds chunk_rows × V. Entropy is computed without grad unless `entropy_grad`
    (an entropy bonus needs it).

    Args:
        logits: (B, T, V) logits aligned with `ids` (logits[:, t] predicts ids[:, t]).
        ids: (B, T) sampled token ids.
        temperature: the rollout temperature (> 0).
        chunk_rows: positions per chunk.
        entropy_grad: keep the graph for the entropy.

    Returns:
        (log_probs (B, T) float32 with grad, entropy (B, T) float32).
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    flat = logits.reshape(-1, logits.shape[-1])
    flat_ids = ids.reshape(-1)
    logps, ents = [], []
    for start in range(0, flat.shape[0], chunk_rows):
        z = flat[start:start + chunk_rows].float() / temperature               # (n, V)
        lse = torch.logsumexp(z, dim=-1)                                         # (n,)
        logps.append(z.gather(-1, flat_ids[start:start + chunk_rows, None]).squeeze(-1) - lse)
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            ents.append(lse - (torch.softmax(z, dim=-1) * z).sum(-1))
    shape = ids.shape
    if not logps:
        empty = flat.new_zeros(shape, dtype=torch.float32)
        return empty, empty.clone()
    return torch.cat(logps).view(shape), torch.cat(ents).view(shape)

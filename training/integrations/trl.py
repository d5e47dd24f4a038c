r"""STARE inside TRL's `GRPOTrainer`: `StareGRPOTrainer`, a subclass with two small overrides.

    from training.integrations.trl import StareGRPOTrainer
    trainer = StareGRPOTrainer(model=..., reward_funcs=..., args=GRPOConfig(loss_type="dapo", ...),
                               train_dataset=..., stare="stare-o1")

What it adds to a stock `GRPOTrainer` (TRL >= 1.16; see docs/trl.md):

1. **Batch entropy and the gate, once per rollout batch** (`_generate_and_score_completions`). After
   TRL has generated and scored a generation batch, one extra no-grad forward pass of the
   *pre-update* policy over that batch measures

       H̄ = Σ_it H_it · mask_it / Σ_it mask_it,     mask = completion_mask ⊙ tool_mask (if present)

   (temperature-scaled, summed over all processes before dividing), and `Controller.update(H̄)`
   sets the gate (and, if adaptive, W and M). This is the old-policy pass of STARE_SPEC §2: the
   gate of a step comes from that step's own pre-update entropy, with no lag. TRL's own pass cannot
   give it: the loss sees one micro-batch at a time, and the first micro-batch needs the gate before
   the others have been forwarded. With TRL's defaults (`steps_per_generation ==
   gradient_accumulation_steps`, `num_iterations == 1`) one rollout batch is one optimizer step, so
   the controller is updated once per optimizer step; otherwise once per rollout batch, as verl.
2. **ω on the clipped per-token loss** (the `get_off_policy_mask` hook). TRL multiplies its
   per-token loss by the value this method returns right after the PPO clip and before the
   KL term and the aggregation: exactly where STARE_SPEC §1.3 puts ω. The override returns

       ω = token_weights(logp_current, A, mask)   (times TRL's own off-policy mask if you set one)

   over the micro-batch TRL passes (scope `micro_batch`, the authors' code), from the current-policy
   log-probs (detached) and TRL's advantages. With the gate off ω ≡ 1 and the loss is bit-for-bit
   TRL's. When `off_policy_mask_threshold` is unset it is set to +inf, so TRL calls the hook while
   its own mask keeps every sequence.

Upstream TRL (pull request #6167, open) adds STARE as `GRPOConfig(loss_type="stare")` with the
settings `stare_variant`, `stare_top_p_ratio`, `stare_reweight_w`, `stare_reweight_m` and
`stare_target_entropy`. This class reads those same `GRPOConfig` fields when `stare` is not given,
refuses `loss_type="stare"` (the two would weight every token twice), and otherwise keeps the
authors' semantics where the pull request differs (docs/stare.md, "STARE in TRL").

Metrics, through TRL's logger: the controller's `stare/gate_on`, `stare/batch_entropy`,
`stare/reweight_w`, `stare/reweight_m`, `stare/target_entropy` (per rollout batch) and the weight
statistics of STARE_SPEC §1.5 as `actor/stare/...` (per micro-batch, averaged over processes).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from stare import Controller, StareConfig, get_preset, token_weights_with_stats

try:
    from trl import GRPOTrainer
except ImportError as exc:
    raise ImportError("training.integrations.trl needs TRL (>= 1.16): pip install 'stare-gym[trl]'") from exc

CLIPPED_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")
"""TRL loss types whose per-token loss is the clipped PPO surrogate STARE re-weights."""

FORWARD_KEYS = ("pixel_values", "image_grid_thw", "num_images", "pixel_attention_mask", "spatial_shapes",
                "num_tiles", "image_sizes", "token_type_ids", "mm_token_type_ids", "image_position_ids")
"""Optional batch entries TRL's `_compute_loss` forwards to the model; the entropy pass forwards them too."""

UPSTREAM_FIELDS = {"variant": "stare_variant", "top_ratio": "stare_top_p_ratio", "w": "stare_reweight_w",
                   "m": "stare_reweight_m", "target_entropy": "stare_target_entropy"}
"""`StareConfig` field -> the `GRPOConfig` field of TRL pull request #6167 with the same meaning."""

__all__ = ["CLIPPED_LOSS_TYPES", "UPSTREAM_FIELDS", "StareGRPOTrainer", "check_trl_settings",
           "resolve_stare_config", "stare_config_from_grpo_args"]


def stare_config_from_grpo_args(args: Any) -> StareConfig | None:
    """The `StareConfig` that upstream-style `GRPOConfig.stare_*` fields describe, or None without any.

    Fields left unset keep the `stare-o1` preset's values (the pull request's defaults are the same:
    O1, P 0.1, W 1.1, M 0.9, H_tgt 0.3).
    """
    given = {ours: getattr(args, theirs) for ours, theirs in UPSTREAM_FIELDS.items()
             if getattr(args, theirs, None) is not None}
    return get_preset("stare-o1").stare.replace(**given) if given else None


def check_trl_settings(loss_type: str, importance_sampling_level: str) -> None:
    """Raise unless TRL's loss is a clipped per-token PPO surrogate STARE can re-weight.

    Raises:
        ValueError: for `loss_type="stare"` (TRL's own STARE: use one or the other), for a loss type
            outside `CLIPPED_LOSS_TYPES`, or for sequence-level importance sampling.
    """
    if loss_type == "stare":
        raise ValueError("GRPOConfig.loss_type='stare' is TRL's own STARE (pull request #6167); with "
                         "StareGRPOTrainer every token would be weighted twice. Use loss_type='dapo' here "
                         "(the authors' setup), or a plain GRPOTrainer with loss_type='stare'")
    if loss_type not in CLIPPED_LOSS_TYPES:
        raise ValueError(f"StareGRPOTrainer needs a clipped PPO loss: GRPOConfig.loss_type must be one "
                         f"of {CLIPPED_LOSS_TYPES}, got {loss_type!r} (use 'dapo' for the authors' setup)")
    if importance_sampling_level != "token":
        raise ValueError("StareGRPOTrainer re-weights tokens: GRPOConfig.importance_sampling_level "
                         f"must be 'token', got {importance_sampling_level!r}")


def resolve_stare_config(stare_cfg: StareConfig | str) -> StareConfig:
    """A `StareConfig`, or the `stare` part of a preset named by `stare.get_preset` (e.g. "stare-c2").

    Raises:
        ValueError: for scope "global_batch", which this integration does not implement.
    """
    cfg = get_preset(stare_cfg).stare if isinstance(stare_cfg, str) else stare_cfg
    if not isinstance(cfg, StareConfig):
        raise TypeError(f"stare must be a stare.StareConfig or a preset name, got {type(stare_cfg).__name__}")
    if cfg.scope != "micro_batch":
        raise ValueError(f"StareGRPOTrainer supports stare scope 'micro_batch' only (the authors' code), got "
                         f"{cfg.scope!r}; use cfg.replace(scope='micro_batch')")
    return cfg


class StareGRPOTrainer(GRPOTrainer):
    """TRL's `GRPOTrainer` with STARE's entropy gate and token weights (module docstring for the details).

    Args:
        *args: passed to `GRPOTrainer`.
        stare: a `stare.StareConfig` or a preset name (`"stare-o1"`, `"stare-c2"`, ...); `enabled`
            false gives ω ≡ 1 and no weight statistics (the controller still runs and logs, as the
            reference). None (default) reads upstream-style `GRPOConfig.stare_*` fields when the
            config has them, else `"stare-o1"`.
        controller: a ready `stare.Controller` (e.g. restored from a checkpoint); built from `stare`
            when None.
        **kwargs: passed to `GRPOTrainer`.

    Raises:
        ValueError: from `check_trl_settings` (a TRL `loss_type` outside `CLIPPED_LOSS_TYPES`: cispo,
            sapo and vespo have no clipped PPO surrogate to re-weight, and "stare" is TRL's own), or
            `importance_sampling_level="sequence"`.
    """

    def __init__(self, *args: Any, stare: StareConfig | str | None = None,
                 controller: Controller | None = None, **kwargs: Any) -> None:
        explicit = None if stare is None else resolve_stare_config(stare)   # fail before loading anything
        super().__init__(*args, **kwargs)
        check_trl_settings(self.loss_type, self.importance_sampling_level)
        self.stare_config = cfg = explicit or resolve_stare_config(
            stare_config_from_grpo_args(self.args) or "stare-o1")
        self.stare_controller = controller or Controller(
            cfg.target_entropy, cfg.w, cfg.m, adaptive=cfg.adaptive, alpha=cfg.alpha, w_max=cfg.w_max,
            m_min=cfg.m_min)
        self._stare_keep_off_policy_mask = self.off_policy_mask_threshold is not None
        if not self._stare_keep_off_policy_mask:
            self.off_policy_mask_threshold = math.inf   # TRL then calls the hook; its own mask keeps all

    # -- 1. the gate: one old-policy entropy pass per rollout batch ---------------------------------------

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        batch = super()._generate_and_score_completions(inputs)
        if self.model.training:
            entropy = self.stare_batch_entropy(batch)
            self.stare_controller.update(entropy)
            for key, value in self.stare_controller.metrics().items():
                self._metrics["train"][key].append(value)
        return batch

    @torch.no_grad()
    def stare_batch_entropy(self, batch: dict[str, Any]) -> float:
        r"""H̄: token-mean entropy of the current (pre-update) policy over the completion tokens of `batch`.

            H̄ = Σ_it H_it·mask_it / max(1, Σ_it mask_it),  sums over all processes,
            mask = completion_mask ⊙ tool_mask

        Args:
            batch: the output of `GRPOTrainer._generate_and_score_completions` (prompt_ids (B, P),
                prompt_mask, completion_ids (B, T), completion_mask, optional tool_mask, and the
                `FORWARD_KEYS` entries TRL's loss forwards to the model, e.g. vision inputs).
        """
        completion_ids = batch["completion_ids"]
        input_ids = torch.cat([batch["prompt_ids"], completion_ids], dim=1)
        attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        _, entropies, _ = self._get_per_token_logps_and_entropies(
            self.model, input_ids, attention_mask, completion_ids.size(1),
            batch_size=self.args.per_device_train_batch_size, compute_entropy=True,
            **{key: batch.get(key) for key in FORWARD_KEYS})                          # (B, T)
        mask = self._stare_mask(batch).to(entropies.dtype)
        totals = self.accelerator.reduce(torch.stack([(entropies * mask).sum(), mask.sum()]), reduction="sum")
        return (totals[0] / totals[1].clamp(min=1.0)).item()

    @staticmethod
    def _stare_mask(batch: dict[str, Any]) -> torch.Tensor:
        """TRL's loss mask: completion_mask, times tool_mask (0 on tool output) when tools were called."""
        mask = batch["completion_mask"]
        return mask * batch["tool_mask"] if "tool_mask" in batch else mask

    # -- 2. ω on the clipped per-token loss ---------------------------------------------------------------

    def get_off_policy_mask(self, advantages: torch.Tensor, per_token_logps: torch.Tensor,
                            sampling_per_token_logps: torch.Tensor, mask: torch.Tensor,
                            off_policy_threshold: float) -> torch.Tensor:
        """ω (B, T) for this micro-batch, times TRL's off-policy sequence mask when the user enabled it.

        TRL calls this once per micro-batch in `_compute_loss` and multiplies its clipped per-token
        loss by the result before adding the KL term and aggregating (STARE_SPEC §1.3).

        Args:
            advantages: (B, 1) TRL's advantages.
            per_token_logps: (B, T) current-policy log-probs (with grad; detached for the selection).
            sampling_per_token_logps: (B, T) behaviour log-probs (TRL's off-policy mask only).
            mask: (B, T) completion_mask ⊙ tool_mask.
            off_policy_threshold: TRL's threshold (+inf when the user left it unset).
        """
        cfg, ctl = self.stare_config, self.stare_controller
        if cfg.enabled:
            weights, stats = token_weights_with_stats(
                per_token_logps.detach(), advantages, mask, variant=cfg.variant, top_ratio=cfg.top_ratio,
                w=ctl.w, m=ctl.m, gate_on=ctl.gate_on, entropy=ctl.entropy, target_entropy=ctl.target_entropy)
            self._log_stare_stats(stats)
        else:   # the reference: ω ≡ 1 and no statistics
            weights = torch.ones_like(per_token_logps, dtype=advantages.dtype)
        if self._stare_keep_off_policy_mask:
            weights = weights * super().get_off_policy_mask(
                advantages, per_token_logps, sampling_per_token_logps, mask, off_policy_threshold)
        return weights.to(per_token_logps.dtype)

    def _log_stare_stats(self, stats: dict[str, torch.Tensor]) -> None:
        """Average the §1.5 statistics over processes (one collective) and append them as actor/stare/..."""
        mode = "train" if self.model.training else "eval"
        values = torch.stack(list(stats.values())).to(self.accelerator.device)
        values = self.accelerator.reduce(values, reduction="mean").tolist()
        for key, value in zip(stats, values, strict=True):
            self._metrics[mode][f"actor/{key}"].append(value)

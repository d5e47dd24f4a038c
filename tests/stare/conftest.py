"""Shared fixture: TRL's own GRPO loss code run on given log-probs, for parity tests of stare's losses.

`trl_loss(...)` calls `trl.GRPOTrainer._compute_loss` (TRL 1.16) unbound on a minimal stand-in for the
trainer: the model forward is replaced by the log-probs and entropies we pass, everything after it
(ratio, clipping, masks, aggregation, entropy bonus and its adaptive controller) is TRL's code.
"""

from __future__ import annotations

import collections
import functools
import types

import pytest
import torch


def _stand_in(trl, *, logps, entropies, loss_type, eps_low, eps_high, level, top_entropy_quantile,
              max_completion_length, entropy_coef, adaptive, entropy_args, extra):
    from accelerate import Accelerator

    args = types.SimpleNamespace(delta=None, use_bias_correction_kl=False, steps_per_generation=1,
                                 **entropy_args)
    self = types.SimpleNamespace(
        loss_type=loss_type, epsilon_low=eps_low, epsilon_high=eps_high, importance_sampling_level=level,
        top_entropy_quantile=top_entropy_quantile, off_policy_mask_threshold=None, beta=0.0, args=args,
        use_vllm=False, vllm_importance_sampling_correction=False, model=types.SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1, max_completion_length=max_completion_length,
        aux_loss_enabled=False, accelerator=Accelerator(cpu=True), entropy_coef=entropy_coef,
        use_adaptive_entropy=adaptive, _entropy_bonus_enabled=entropy_coef != 0.0 or adaptive,
        _last_world_entropy=float("inf"), _entropy_window_stats=None,
        _metrics={"train": collections.defaultdict(list), "eval": collections.defaultdict(list)})
    for key, value in extra.items():      # settings a TRL version may read from the trainer itself
        setattr(self, key, value)
    self._get_per_token_logps_and_entropies = lambda *a, **k: (logps, entropies, None)
    self.get_high_entropy_mask = functools.partial(trl.GRPOTrainer.get_high_entropy_mask, self)
    return self


@pytest.fixture
def trl_loss():
    """Run TRL's `_compute_loss` on our tensors; returns (loss, the stand-in trainer, for its state)."""
    trl = pytest.importorskip("trl")

    def run(logps, old_logps, advantages, mask, *, loss_type="dapo", eps_low=0.2, eps_high=0.28,
            level="token", entropies=None, top_entropy_quantile=1.0, max_completion_length=None,
            entropy_coef=0.0, adaptive=False, entropy_args=None, extra=None, trainer=None):
        batch, length = logps.shape
        entropies = torch.zeros_like(logps) if entropies is None else entropies
        if trainer is None:
            trainer = _stand_in(trl, logps=logps, entropies=entropies, loss_type=loss_type, eps_low=eps_low,
                                eps_high=eps_high, level=level, top_entropy_quantile=top_entropy_quantile,
                                max_completion_length=max_completion_length or length,
                                entropy_coef=entropy_coef, adaptive=adaptive, entropy_args=entropy_args or {},
                                extra=extra or {})
        else:
            trainer._get_per_token_logps_and_entropies = lambda *a, **k: (logps, entropies, None)
        inputs = {"prompt_ids": torch.zeros(batch, 1, dtype=torch.long),
                  "prompt_mask": torch.ones(batch, 1, dtype=torch.long),
                  "completion_ids": torch.zeros(batch, length, dtype=torch.long), "completion_mask": mask,
                  "advantages": advantages, "old_per_token_logps": old_logps,
                  "num_items_in_batch": mask.sum().float()}
        return trl.GRPOTrainer._compute_loss(trainer, None, inputs), trainer

    return run

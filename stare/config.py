"""Algorithm presets as frozen keyword-only dataclasses: GRPO, DAPO, GRPO-ds, STARE-O1/C2 and the baselines.

The baselines (Dr. GRPO, GSPO, CISPO, Clip-Cov, KL-Cov, adaptive entropy bonus, forking tokens) are
GRPO-ds with only the method's own pieces changed, so each is compared with STARE on equal terms.

Override a field with `preset.replace(clip_high=0.3)` or `preset.replace(stare=preset.stare.replace(w=1.05))`
(both are `dataclasses.replace`, so `__post_init__` validates the result).
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field
from typing import Any, Literal

from stare.losses import AGGREGATIONS, Aggregation

Scope = Literal["micro_batch", "global_batch"]
Variant = Literal["O1", "C2"]
KLEstimator = Literal["k1", "k3"]
LossMode = Literal["vanilla", "gspo", "cispo", "clip_cov", "kl_cov"]
AggScope = Literal["global", "micro_batch"]
SCOPES = ("micro_batch", "global_batch")
AGG_SCOPES = ("global", "micro_batch")
LOSS_MODES = ("vanilla", "gspo", "cispo", "clip_cov", "kl_cov")


def _fail(owner: str, name: str, value: Any, allowed: str) -> None:
    raise ValueError(f"{owner}.{name} must be {allowed}, got {value!r}")


class _Replace:
    def replace(self, **overrides: Any) -> Any:
        """A copy with `overrides` applied and validated (`dataclasses.replace`)."""
        return dataclasses.replace(self, **overrides)


@dataclass(frozen=True, kw_only=True)
class StareConfig(_Replace):
    """STARE's token re-weighting and entropy gate (STARE_SPEC §1.4 names in brackets)."""

    enabled: bool = False
    """Apply STARE's ω [enabled]. Off gives ω ≡ 1, i.e. plain GRPO/DAPO."""
    variant: Variant = "O1"
    """"O1" boosts high-surprisal positive tokens; "C2" also damps high-surprisal negatives (any case)."""
    top_ratio: float = 0.1
    """P in [0, 1]: fraction of each advantage-sign subset re-weighted [top_p_ratio]."""
    w: float = 1.1
    """W: weight of the selected positive tokens; the controller's starting value [reweight_w]."""
    m: float = 0.9
    """M: weight of the selected negative tokens (C2); the controller's starting value [reweight_m]."""
    target_entropy: float = 0.3
    """H_tgt: the gate is on while the batch token-mean entropy is strictly below it."""
    adaptive: bool = False
    """Move W and M by ±alpha per step toward holding H_tgt (paper §4.4; off in every shipped run)."""
    alpha: float = 0.01
    """Step of the adaptive schedule."""
    w_max: float = 1.5
    """Upper clip of W under the adaptive schedule (lower clip 1)."""
    m_min: float = 0.5
    """Lower clip of M under the adaptive schedule (upper clip 1)."""
    scope: Scope = "micro_batch"
    """Population of the surprisal quantile: "micro_batch" (authors' code) or "global_batch" (paper text)."""

    def __post_init__(self) -> None:
        name = str(self.variant).upper()
        if name not in ("O1", "C2"):
            _fail("StareConfig", "variant", self.variant, "'O1' or 'C2' (case-insensitive)")
        object.__setattr__(self, "variant", name)
        if not 0.0 <= self.top_ratio <= 1.0:
            _fail("StareConfig", "top_ratio", self.top_ratio, "in [0, 1]")
        if self.w <= 0 or self.m <= 0:
            _fail("StareConfig", "w" if self.w <= 0 else "m", self.w if self.w <= 0 else self.m,
                  "> 0 (ω must keep every token's gradient sign)")
        if self.w_max < 1.0:
            _fail("StareConfig", "w_max", self.w_max, ">= 1")
        if not 0.0 <= self.m_min <= 1.0:
            _fail("StareConfig", "m_min", self.m_min, "in [0, 1]")
        if self.alpha < 0:
            _fail("StareConfig", "alpha", self.alpha, ">= 0")
        if self.scope not in SCOPES:
            _fail("StareConfig", "scope", self.scope, f"one of {SCOPES}")


@dataclass(frozen=True, kw_only=True)
class AlgoConfig(_Replace):
    """Policy-optimisation settings shared by GRPO, DAPO and STARE (verl names in brackets)."""

    name: str = "custom"
    """Preset name, for logs and reports."""
    norm_adv_by_std: bool = True
    """Divide GRPO advantages by the unbiased group std [norm_adv_by_std_in_grpo]."""
    loss_mode: LossMode = "vanilla"
    """Per-token surrogate: "vanilla" (dual-clip PPO), "gspo", "cispo", "clip_cov" or "kl_cov" [loss_mode]."""
    clip_low: float = 0.2
    """ε_low in [0, 1]: the ratio is clipped below at 1 - ε_low; 1 = no lower bound [clip_ratio_low]."""
    clip_high: float = 0.28
    """ε_high: the ratio is clipped above at 1 + ε_high; > ε_low is DAPO's clip-higher [clip_ratio_high]."""
    clip_c: float = 10.0
    """Dual-clip constant c > 1 bounding the loss of negative-advantage tokens at -A·c [clip_ratio_c]."""
    loss_agg: Aggregation = "token-mean"
    """Loss reduction: "token-mean", "seq-mean-token-sum", "seq-mean-token-mean" or "seq-mean-token-sum-norm"
    (Dr. GRPO) [loss_agg_mode]."""
    loss_agg_scope: AggScope = "global"
    """Whose counts divide the loss: "global" (one token mean over the mini-batch of every process) or
    "micro_batch" (the authors' FSDP actor: a token mean per micro-batch, times that micro-batch's share
    of the mini-batch's sequences)."""
    loss_norm_length: int = 0
    """Constant L of "seq-mean-token-sum-norm"; 0 = the response-length budget [loss_scale_factor]."""
    clip_cov_ratio: float = 2e-4
    """Clip-Cov: fraction of valid tokens cut from the gradient [policy_loss.clip_cov_ratio]."""
    clip_cov_lb: float = 1.0
    """Clip-Cov: candidates have covariance above this [policy_loss.clip_cov_lb]."""
    clip_cov_ub: float = 5.0
    """Clip-Cov: candidates have covariance below this [policy_loss.clip_cov_ub]."""
    kl_cov_ratio: float = 2e-4
    """KL-Cov: fraction of valid tokens (top covariance) given the |log-ratio| penalty [kl_cov_ratio]."""
    kl_cov_coef: float = 1.0
    """KL-Cov: weight of that penalty [policy_loss.ppo_kl_coef]."""
    top_entropy_ratio: float = 1.0
    """Forking tokens: train only on the top ρ of tokens by entropy; 1 = all [TRL top_entropy_quantile]."""
    kl_coef: float = 0.0
    """Weight of the KL(π‖π_ref) loss term; > 0 needs a reference model [kl_loss_coef]."""
    kl_estimator: KLEstimator = "k3"
    """KL estimator for the loss term: "k1" or "k3" (verl's low_var_kl) [kl_loss_type]."""
    entropy_coef: float = 0.0
    """Weight of the entropy bonus (subtracted from the loss); the start when adaptive [entropy_coeff]."""
    entropy_adaptive: bool = False
    """Move the bonus weight toward holding `entropy_target` (Skywork-OR1) [TRL use_adaptive_entropy]."""
    entropy_target: float = 0.2
    """Adaptive bonus: target token-mean entropy; the bonus acts only at or below it [TRL entropy_target]."""
    entropy_coef_delta: float = 0.005
    """Adaptive bonus: step of the weight per training step [TRL entropy_coef_delta]."""
    entropy_coef_min: float = 0.0
    """Adaptive bonus: lower clip of the weight [TRL entropy_coef_min]."""
    entropy_coef_max: float = 1.0
    """Adaptive bonus: upper clip of the weight [TRL entropy_coef_max]."""
    dynamic_sampling: bool = False
    """Drop groups whose metric has zero variance; re-sample to fill the batch [filter_groups.enable]."""
    max_gen_rounds: int = 10
    """Sampling rounds allowed to fill the batch before giving up (0 = unlimited) [max_num_gen_batches]."""
    overlong_buffer: int = 0
    """Length of DAPO's overlong punishment ramp in tokens; 0 disables it [overlong_buffer.len]."""
    overlong_penalty: float = 1.0
    """Penalty at the full response budget when the buffer is on [overlong_buffer.penalty_factor]."""
    mask_truncated: bool = False
    """Drop truncated completions from the loss (DAPO's overlong filtering)."""
    stare: StareConfig = field(default_factory=StareConfig)
    """STARE's token weights and gate (disabled gives plain GRPO/DAPO)."""

    def __post_init__(self) -> None:
        if not (0.0 <= self.clip_low <= 1.0):
            _fail("AlgoConfig", "clip_low", self.clip_low, "in [0, 1] (1 = no lower bound)")
        if self.loss_agg_scope not in AGG_SCOPES:
            _fail("AlgoConfig", "loss_agg_scope", self.loss_agg_scope, f"one of {AGG_SCOPES}")
        if self.loss_mode not in LOSS_MODES:
            _fail("AlgoConfig", "loss_mode", self.loss_mode, f"one of {LOSS_MODES}")
        if self.clip_high < 0.0:
            _fail("AlgoConfig", "clip_high", self.clip_high, ">= 0")
        if self.clip_c <= 1.0:
            _fail("AlgoConfig", "clip_c", self.clip_c, "> 1")
        if self.loss_agg not in AGGREGATIONS:
            _fail("AlgoConfig", "loss_agg", self.loss_agg, f"one of {AGGREGATIONS}")
        if self.kl_estimator not in ("k1", "k3"):
            _fail("AlgoConfig", "kl_estimator", self.kl_estimator, "'k1' or 'k3'")
        for key in ("kl_coef", "entropy_coef", "overlong_penalty", "loss_norm_length", "kl_cov_coef",
                    "entropy_coef_delta", "entropy_coef_min"):
            if getattr(self, key) < 0:
                _fail("AlgoConfig", key, getattr(self, key), ">= 0")
        for key in ("clip_cov_ratio", "kl_cov_ratio"):
            if not 0.0 < getattr(self, key) <= 1.0:
                _fail("AlgoConfig", key, getattr(self, key), "in (0, 1]")
        if not 0.0 <= self.top_entropy_ratio <= 1.0:
            _fail("AlgoConfig", "top_entropy_ratio", self.top_entropy_ratio, "in [0, 1] (1 = every token)")
        if self.clip_cov_lb >= self.clip_cov_ub:
            _fail("AlgoConfig", "clip_cov_lb", self.clip_cov_lb, f"< clip_cov_ub ({self.clip_cov_ub})")
        if self.entropy_coef_max < self.entropy_coef_min:
            _fail("AlgoConfig", "entropy_coef_max", self.entropy_coef_max,
                  f">= entropy_coef_min ({self.entropy_coef_min})")
        if self.max_gen_rounds < 0:
            _fail("AlgoConfig", "max_gen_rounds", self.max_gen_rounds, ">= 0 (0 = unlimited)")
        if self.overlong_buffer < 0:
            _fail("AlgoConfig", "overlong_buffer", self.overlong_buffer, ">= 0 tokens (0 disables)")
        if not isinstance(self.stare, StareConfig):
            _fail("AlgoConfig", "stare", self.stare, "a StareConfig")

    def flat(self) -> dict[str, Any]:
        """All settings as one flat dict (`stare.*` prefixed), for tables and logs."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "stare"}
        out.update({f"stare.{k}": v for k, v in dataclasses.asdict(self.stare).items()})
        return out


_DAPO_CORE = dict(clip_low=0.2, clip_high=0.28, clip_c=10.0, loss_agg="token-mean", kl_coef=0.0,
                  entropy_coef=0.0, dynamic_sampling=True, max_gen_rounds=10)
# GRPO-ds turns the STARE block off with these values (its script: top_p 0, W = M = 1, H_tgt = 0).
_STARE_OFF = StareConfig(enabled=False, variant="O1", top_ratio=0.0, w=1.0, m=1.0, target_entropy=0.0)
_STARE_ON = StareConfig(enabled=True, variant="O1", top_ratio=0.1, w=1.1, m=0.9, target_entropy=0.3)

PRESETS: dict[str, AlgoConfig] = {
    # Plain GRPO as verl's GRPO example runs it: symmetric clip 0.2, verl's default dual clip c = 3,
    # k3 KL loss with coefficient 0.001 (needs a reference model), verl's default token-mean reduction
    # (the example sets no loss_agg_mode; DeepSeekMath's original per-sequence token mean is
    # loss_agg="seq-mean-token-mean"), no dynamic sampling, no length shaping.
    "grpo": AlgoConfig(name="grpo", clip_low=0.2, clip_high=0.2, clip_c=3.0, loss_agg="token-mean",
                       kl_coef=0.001, kl_estimator="k3", dynamic_sampling=False, stare=StareConfig()),
    # DAPO (verl recipe/dapo, STARE_SPEC §3.2): clip-higher 0.2/0.28, c = 10, token-mean, no KL,
    # dynamic sampling on acc (10 rounds), overlong soft punishment with a 4096-token ramp and
    # factor 1.0. The recipe scores ±1; rewards here stay {0, 1} like the other presets: GRPO's
    # std-normalised advantage is unchanged by that affine map, only the overlong penalty then weighs
    # relatively twice as much against the reward range. Scale `overlong_buffer` to your budget.
    "dapo": AlgoConfig(name="dapo", **_DAPO_CORE, overlong_buffer=4096, overlong_penalty=1.0,
                       stare=StareConfig()),
    # GRPO-ds, the authors' baseline (STARE_SPEC §3.1 GRPO_ds script): DAPO without overlong shaping,
    # {0, 1} reward, the STARE block present but disabled (top_p 0, W = M = 1, H_tgt = 0).
    "grpo-ds": AlgoConfig(name="grpo-ds", **_DAPO_CORE, stare=_STARE_OFF),
    # STARE-O1 (STARE script): GRPO-ds plus ω = 1.1 on the top-10 % surprisal positive tokens while
    # the batch entropy is below 0.3. Static W/M (adaptive off), micro-batch scope as in the code.
    "stare-o1": AlgoConfig(name="stare-o1", **_DAPO_CORE, stare=_STARE_ON),
    # STARE-C2: STARE-O1 plus ω = 0.9 on the top-10 % surprisal negative tokens.
    "stare-c2": AlgoConfig(name="stare-c2", **_DAPO_CORE, stare=_STARE_ON.replace(variant="C2")),
    # The baselines below are GRPO-ds with only the method's own pieces changed (docs/stare.md).
    # Dr. GRPO (Liu et al. 2025): no std normalisation, loss summed and divided by a constant length.
    "dr-grpo": AlgoConfig(name="dr-grpo", **{**_DAPO_CORE, "loss_agg": "seq-mean-token-sum-norm"},
                          norm_adv_by_std=False, stare=_STARE_OFF),
    # GSPO (Zheng et al. 2025): sequence-level ratio and clip, the paper's 3e-4 / 4e-4, per-sequence mean.
    "gspo": AlgoConfig(name="gspo", **{**_DAPO_CORE, "clip_low": 3e-4, "clip_high": 4e-4,
                                      "loss_agg": "seq-mean-token-mean"}, loss_mode="gspo", stare=_STARE_OFF),
    # CISPO (MiniMax-M1): clipped stop-gradient IS weight, no lower bound, ε_max = 5 (TRL's advice).
    "cispo": AlgoConfig(name="cispo", **{**_DAPO_CORE, "clip_low": 1.0, "clip_high": 4.0}, loss_mode="cispo",
                        stare=_STARE_OFF),
    # Clip-Cov (Cui et al. 2025): symmetric clip 0.2 plus 2e-4 of tokens with covariance in (1, 5) detached.
    "clip-cov": AlgoConfig(name="clip-cov", **{**_DAPO_CORE, "clip_high": 0.2}, loss_mode="clip_cov",
                           clip_cov_ratio=2e-4, clip_cov_lb=1.0, clip_cov_ub=5.0, stare=_STARE_OFF),
    # KL-Cov (Cui et al. 2025): no clipping; |log-ratio| penalty (coef 1) on the top 0.2 % covariance tokens.
    "kl-cov": AlgoConfig(name="kl-cov", **_DAPO_CORE, loss_mode="kl_cov", kl_cov_ratio=2e-3, kl_cov_coef=1.0,
                         stare=_STARE_OFF),
    # Adaptive entropy bonus (Skywork-OR1): weight moves by 0.005 per step toward H̄ = 0.3 (STARE's target).
    "adaptive-entropy": AlgoConfig(name="adaptive-entropy", **_DAPO_CORE, entropy_adaptive=True,
                                   entropy_target=0.3, entropy_coef_delta=0.005, stare=_STARE_OFF),
    # Forking tokens (Wang et al. 2025, "Beyond the 80/20 rule"): gradient only on the top 20 % entropy.
    "forking-tokens": AlgoConfig(name="forking-tokens", **_DAPO_CORE, top_entropy_ratio=0.2,
                                 stare=_STARE_OFF),
}
"""The algorithm presets (reference defaults of STARE_SPEC §3); all use the reward acc ∈ {0, 1}.

- `grpo`: plain GRPO as verl's example runs it (clip 0.2/0.2, c = 3, k3 KL 0.001, token-mean).
- `dapo`: DAPO's recipe (clip-higher 0.2/0.28, c = 10, token-mean, no KL, dynamic sampling on acc,
  overlong ramp 4096 tokens, factor 1). Keeps {0, 1} rewards instead of the recipe's ±1: std-normalised
  advantages are unchanged; only the overlong penalty weighs relatively more.
- `grpo-ds`: the authors' baseline, DAPO without overlong shaping, STARE block disabled.
- `stare-o1`: GRPO-ds + ω = 1.1 on the top-10 % surprisal positive tokens while H̄ < 0.3.
- `stare-c2`: STARE-O1 + ω = 0.9 on the top-10 % surprisal negative tokens.
- `dr-grpo`, `gspo`, `cispo`, `clip-cov`, `kl-cov`, `adaptive-entropy`, `forking-tokens`: GRPO-ds
  with only the named method's pieces changed (the table in docs/stare.md).
"""


def get_preset(name: str) -> AlgoConfig:
    """Look up a preset by name (case-insensitive, '_' accepted for '-').

    Raises:
        ValueError: for an unknown name, listing the presets and the closest match.
    """
    key = name.lower().replace("_", "-")
    if key in PRESETS:
        return PRESETS[key]
    close = difflib.get_close_matches(key, PRESETS, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ValueError(f"unknown algorithm preset {name!r}; available: {', '.join(PRESETS)}.{hint}")

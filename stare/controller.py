"""The closed-loop entropy gate and the optional adaptive W/M schedule (docs/stare.md)."""

from __future__ import annotations

import math
import warnings
from typing import Any


class Controller:
    r"""Target-entropy gate of STARE, updated once per training step with the batch entropy H̄.

    update(H):
        if H is not finite: warn, change nothing (the gate keeps its previous value)
        entropy = H;  gate_on = H < target_entropy          (strict: H == target turns it off)
        if adaptive and alpha != 0:                          (runs whether the gate is on or off)
            sgn = sign(target_entropy - H)
            w = clip(w + alpha·sgn, 1, w_max);  m = clip(m - alpha·sgn, m_min, 1)

    H̄ is the token-mean entropy over the *whole* training batch from the old-log-prob pass, before
    the update (not the per-micro-batch entropy of the loss). The gate starts ON and `entropy`
    starts NaN. Unlike the reference, `state_dict()` lets a resumed run keep adaptive W/M.

    Args:
        target_entropy: H_tgt; the gate is on while H̄ < H_tgt.
        w: initial W (weight of high-surprisal positive tokens).
        m: initial M (weight of high-surprisal negative tokens, C2).
        adaptive: move W and M by ±alpha each update.
        alpha: step of the adaptive schedule.
        w_max: upper clip of W (lower clip is 1; a starting W below 1 is clipped at the first update).
        m_min: lower clip of M (upper clip is 1).
    """

    def __init__(self, target_entropy: float = 0.3, w: float = 1.1, m: float = 0.9, *, adaptive: bool = False,
                 alpha: float = 0.01, w_max: float = 1.5, m_min: float = 0.5) -> None:
        if w_max < 1.0:
            raise ValueError(f"w_max must be >= 1 (W is clipped to [1, w_max]), got {w_max}")
        if not 0.0 <= m_min <= 1.0:
            raise ValueError(f"m_min must lie in [0, 1] (M is clipped to [m_min, 1]), got {m_min}")
        self.target_entropy = float(target_entropy)
        self.adaptive = bool(adaptive)
        self.alpha = float(alpha)
        self.w_max = float(w_max)
        self.m_min = float(m_min)
        self.w = float(w)
        self.m = float(m)
        self.gate_on = True
        self.entropy = math.nan

    def update(self, entropy: float) -> None:
        """Feed this step's pre-update batch entropy H̄; sets `gate_on` and, if adaptive, W and M."""
        value = float(entropy)
        if not math.isfinite(value):
            warnings.warn(f"STARE controller got a non-finite entropy ({value}); keeping the previous state "
                          f"(gate_on={self.gate_on}, w={self.w}, m={self.m})", RuntimeWarning, stacklevel=2)
            return
        self.entropy = value
        self.gate_on = value < self.target_entropy
        if self.adaptive and self.alpha != 0.0:
            sgn = (self.target_entropy > value) - (self.target_entropy < value)   # sign(H_tgt - H)
            self.w = min(max(self.w + self.alpha * sgn, 1.0), self.w_max)
            self.m = min(max(self.m - self.alpha * sgn, self.m_min), 1.0)

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: settings and the mutable state (w, m, gate_on, entropy)."""
        return {"target_entropy": self.target_entropy, "adaptive": self.adaptive, "alpha": self.alpha,
                "w_max": self.w_max, "m_min": self.m_min, "w": self.w, "m": self.m,
                "gate_on": self.gate_on, "entropy": self.entropy}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a `state_dict()`; unknown or missing keys raise `KeyError` naming them."""
        expected = set(self.state_dict())
        missing, unknown = expected - set(state), set(state) - expected
        if missing or unknown:
            raise KeyError(f"Controller state mismatch: missing {sorted(missing)}, unknown {sorted(unknown)}")
        for key in ("target_entropy", "alpha", "w_max", "m_min", "w", "m", "entropy"):
            setattr(self, key, float(state[key]))
        self.adaptive = bool(state["adaptive"])
        self.gate_on = bool(state["gate_on"])

    def metrics(self) -> dict[str, float]:
        """Driver-side metrics the reference logs each step (`stare/batch_entropy` NaN before any update)."""
        return {"stare/gate_on": float(self.gate_on), "stare/target_entropy": self.target_entropy,
                "stare/reweight_w": self.w, "stare/reweight_m": self.m, "stare/batch_entropy": self.entropy}

    def __repr__(self) -> str:
        return (f"Controller(target_entropy={self.target_entropy}, w={self.w}, m={self.m}, "
                f"gate_on={self.gate_on}, entropy={self.entropy}, adaptive={self.adaptive}, "
                f"alpha={self.alpha}, w_max={self.w_max}, m_min={self.m_min})")

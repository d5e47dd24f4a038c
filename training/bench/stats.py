"""Statistics of the bench report: CIs over seeds, paired tests, bootstraps, power.

    mean_ci(x)            mean ± t_{0.975, n−1} · sd / √n (Student t over seeds)
    paired_test(d)        paired t-test p-value and the two-sided sign test of per-seed differences d
    block_bootstrap       pooled mean over steps, CI by resampling whole seeds (blocks) with replacement
    puzzle_bootstrap      paired difference of per-puzzle scores, CI by resampling puzzles
    mde80(sd, n)          smallest mean difference a two-sided paired t-test at α = 0.05 detects with
                          80% power: the δ with noncentral-t power(δ·√n / sd) = 0.8
    seeds_needed(effect, sd)   smallest n with mde80(sd, n) ≤ |effect|
    slope(x, y)           least-squares slope

Randomness is seeded (`SEED`) so a report is reproducible. scipy is imported inside the functions that
use it, so `stare --help` does not pay for it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

SEED = 0
ALPHA = 0.05
BOOTSTRAP = 2000


@dataclass(frozen=True)
class Estimate:
    """A mean with its 95% CI and the number of units it rests on."""

    mean: float
    lo: float
    hi: float
    n: int

    def as_dict(self) -> dict[str, object]:
        """{"mean", "ci95": [lo, hi], "n"} (summary.json)."""
        return {"mean": _num(self.mean), "ci95": [_num(self.lo), _num(self.hi)], "n": self.n}

    def text(self, digits: int = 3, signed: bool = False) -> str:
        """`0.123 [0.100, 0.150]`."""
        fmt = f"{{:{'+' if signed else ''}.{digits}f}}"
        if self.n == 0 or math.isnan(self.mean):
            return "n/a"
        ci = "" if math.isnan(self.lo) else f" [{fmt.format(self.lo)}, {fmt.format(self.hi)}]"
        return fmt.format(self.mean) + ci


def _num(x: float) -> float | None:
    return None if x is None or math.isnan(x) else float(x)


def _clean(values: Sequence[float]) -> np.ndarray:
    xs = np.asarray([v for v in values if v is not None], dtype=float)
    return xs[~np.isnan(xs)]


def _t_crit(df: int) -> float:
    """t_{1−α/2, df}: the two-sided Student-t critical value."""
    from scipy import stats

    return float(stats.t.ppf(1 - ALPHA / 2, df))


def mean_ci(values: Sequence[float]) -> Estimate:
    """Mean and 95% Student-t CI over independent units (seeds); NaNs ignored; CI nan for n < 2."""
    xs = _clean(values)
    if xs.size == 0:
        return Estimate(math.nan, math.nan, math.nan, 0)
    mean = float(xs.mean())
    if xs.size == 1:
        return Estimate(mean, math.nan, math.nan, 1)
    half = _t_crit(xs.size - 1) * float(xs.std(ddof=1)) / math.sqrt(xs.size)
    return Estimate(mean, mean - half, mean + half, int(xs.size))


def paired_test(diffs: Sequence[float]) -> tuple[float, float, int]:
    """(paired t-test p, two-sided sign-test p, number of positive differences); nan p for n < 2."""
    from scipy import stats

    d = _clean(diffs)
    positive = int((d > 0).sum())
    if d.size < 2:
        return math.nan, math.nan, positive
    t_p = float(stats.ttest_1samp(d, 0.0).pvalue) if d.std(ddof=1) > 0 else math.nan
    nonzero = int((d != 0).sum())
    sign_p = float(stats.binomtest(positive, nonzero, 0.5).pvalue) if nonzero else math.nan
    return t_p, sign_p, positive


def block_bootstrap(blocks: Sequence[Sequence[float]]) -> Estimate:
    """Mean over all values of all blocks; 95% percentile CI from resampling blocks with replacement.

    `n` is the number of values. With one block the CI is nan (nothing to resample).
    """
    arrays = [_clean(b) for b in blocks]
    arrays = [a for a in arrays if a.size]
    if not arrays:
        return Estimate(math.nan, math.nan, math.nan, 0)
    pooled = np.concatenate(arrays)
    if len(arrays) < 2:
        return Estimate(float(pooled.mean()), math.nan, math.nan, int(pooled.size))
    rng = np.random.default_rng(SEED)
    sums = np.array([a.sum() for a in arrays])
    sizes = np.array([a.size for a in arrays])
    picks = rng.integers(0, len(arrays), size=(BOOTSTRAP, len(arrays)))
    means = sums[picks].sum(1) / sizes[picks].sum(1)
    lo, hi = np.quantile(means, [ALPHA / 2, 1 - ALPHA / 2])
    return Estimate(float(pooled.mean()), float(lo), float(hi), int(pooled.size))


def puzzle_bootstrap(a: Sequence[float], b: Sequence[float]) -> Estimate:
    """Paired difference mean(b − a) over puzzles with a 95% percentile bootstrap CI (puzzles resampled)."""
    d = np.asarray(b, dtype=float) - np.asarray(a, dtype=float)
    if d.size == 0:
        return Estimate(math.nan, math.nan, math.nan, 0)
    rng = np.random.default_rng(SEED)
    means = d[rng.integers(0, d.size, size=(BOOTSTRAP, d.size))].mean(1)
    lo, hi = np.quantile(means, [ALPHA / 2, 1 - ALPHA / 2])
    return Estimate(float(d.mean()), float(lo), float(hi), int(d.size))


def _power(effect: float, sd: float, n: int) -> float:
    """Power of the two-sided one-sample t-test at α for a true mean `effect` (noncentral t)."""
    from scipy import stats

    df, crit = n - 1, _t_crit(n - 1)
    nc = effect * math.sqrt(n) / sd
    upper, lower = stats.nct.sf(crit, df, nc), stats.nct.cdf(-crit, df, nc)
    upper = upper if not math.isnan(upper) else float(nc > crit)  # scipy's nct can fail far in the tail
    return float(upper + (0.0 if math.isnan(lower) else lower))


def mde80(sd: float, n: int) -> float:
    """Smallest |mean| detected with 80% power by a paired t-test over n units of spread sd (nan if n < 2)."""
    if n < 2 or not sd > 0:
        return math.nan
    from scipy import optimize

    hi = (_t_crit(n - 1) + 5) * sd / math.sqrt(n)  # noncentrality crit + 5: power ~ 1
    return float(optimize.brentq(lambda e: _power(e, sd, n) - 0.8, 1e-9 * hi, hi))


def seeds_needed(effect: float, sd: float, limit: int = 100_000) -> float:
    """Smallest n ≥ 2 with mde80(sd, n) ≤ |effect| (nan when effect or sd is not positive)."""
    if not abs(effect) > 0 or not sd > 0:
        return math.nan
    n = 2
    while n < limit and _power(abs(effect), sd, n) < 0.8:
        n = n + 1 if n < 64 else int(n * 1.1)
    return float(n)


def slope(x: Sequence[float], y: Sequence[float]) -> float:
    """Least-squares slope of y on x (nan with fewer than 2 points)."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xs.size < 2 or np.ptp(xs) == 0:
        return math.nan
    return float(np.polyfit(xs, ys, 1)[0])

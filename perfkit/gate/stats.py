"""The statistics of the gate: how many samples a percentile needs, and a seeded bootstrap.

No scipy needed: the bootstrap is numpy only, and seeded so a gate's verdict is a
pure function of its two records.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np


def min_samples(pct: float, *, confidence: float = 0.99, tolerance: int = 1) -> int:
    """The fewest samples that can certify a latency percentile at all (MLPerf LoadGen's early-stopping rule).

    The smallest n for which, with at most `tolerance` samples above the percentile,
    P(Binomial(n, 1 - pct/100) <= tolerance) <= 1 - confidence. For p99 that is 662.
    """
    p_over = 1.0 - pct / 100.0
    if p_over <= 0.0:
        raise ValueError(f"percentile {pct} has no tail")
    alpha = 1.0 - confidence
    n = tolerance + 1
    while True:
        # P(X <= t) for X ~ Binomial(n, p_over), in log space for large n
        cdf = sum(
            math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1))
            * p_over**k
            * (1 - p_over) ** (n - k)
            for k in range(tolerance + 1)
        )
        if cdf <= alpha:
            return n
        n += 1 if n < 1000 else max(1, n // 1000)


@dataclass(frozen=True)
class DiffStats:
    """Bootstrap of the relative difference of means (current vs baseline) of per-window values.

    `shifts` are bootstrap draws of the relative difference minus the observed one:
    the noise around any point estimate, borrowed from the windows.
    """

    observed_rel: float
    shifts: np.ndarray
    n_baseline: int
    n_current: int
    cohens_d: float

    def with_job_noise(self, sd_rel: float, *, seed: int = 0) -> DiffStats:
        """These draws with two independent job factors added (lognormal, sd `sd_rel` each):
        the noise between two CI jobs that a stored baseline carries and no window sees."""
        if sd_rel <= 0.0:
            return self
        rng = np.random.default_rng([seed, 1])
        factor = np.exp(rng.normal(0.0, math.sqrt(2.0) * sd_rel, size=len(self.shifts)))
        noisy = (1.0 + self.observed_rel + self.shifts) * factor - 1.0
        return dataclasses.replace(self, shifts=noisy - self.observed_rel)

    def interval(self, point_rel: float, level: float) -> tuple[float, float]:
        """Two-sided interval at `level` around a point estimate (relative)."""
        lo, hi = np.quantile(self.shifts, [(1 - level) / 2, (1 + level) / 2])
        return point_rel + float(lo), point_rel + float(hi)

    def prob_positive(self, point_rel: float) -> float:
        """Bootstrap probability that the relative difference is above zero."""
        return float(np.mean(point_rel + self.shifts > 0.0))

    def one_sided_margin(self, point_rel: float, level: float) -> float:
        """How far the one-sided `level` bound lies from the point, toward zero (a half-width)."""
        if point_rel >= 0:
            return -float(np.quantile(self.shifts, 1 - level))
        return float(np.quantile(self.shifts, level))


def t_quantile(q: float, df: float) -> float:
    """Student-t quantile by the Cornish-Fisher expansion (within ~3% for df >= 2; no scipy)."""
    z = NormalDist().inv_cdf(q)
    df = max(df, 1.0)
    return (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )


def welch_df(b: np.ndarray, c: np.ndarray) -> float:
    """Welch-Satterthwaite degrees of freedom of a difference of two means."""
    vb, vc = b.var(ddof=1) / len(b), c.var(ddof=1) / len(c)
    den = vb**2 / (len(b) - 1) + vc**2 / (len(c) - 1)
    return float((vb + vc) ** 2 / den) if den > 0 else float(len(b) + len(c) - 2)


def bootstrap_rel_diff(
    baseline: np.ndarray, current: np.ndarray, *, n_boot: int = 4000, seed: int = 0, level: float = 0.975
) -> DiffStats:
    """Seeded bootstrap of (mean(current) - mean(baseline)) / mean(baseline).

    The plain bootstrap of a mean is far too narrow for the handful of windows a level
    has, so residuals are expanded by sqrt(n/(n-1)) before resampling, and the draws are
    widened by t_level(Welch df) / z_level: Student-t tails for few windows, the plain
    bootstrap for many. Needs >= 2 values a side.
    """
    b = np.asarray(baseline, dtype=float)
    c = np.asarray(current, dtype=float)
    if len(b) < 2 or len(c) < 2:
        raise ValueError("need at least 2 windows on each side")
    rng = np.random.default_rng(seed)
    mb, mc = float(b.mean()), float(c.mean())
    if mb == 0.0:
        raise ValueError("baseline mean is zero")
    rb = (b - mb) * math.sqrt(len(b) / (len(b) - 1))
    rc = (c - mc) * math.sqrt(len(c) / (len(c) - 1))
    bb = mb + rb[rng.integers(0, len(b), size=(n_boot, len(b)))].mean(axis=1)
    cc = mc + rc[rng.integers(0, len(c), size=(n_boot, len(c)))].mean(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = (cc - bb) / bb
    rel = rel[np.isfinite(rel)]
    observed = (mc - mb) / mb
    widen = t_quantile(level, welch_df(b, c)) / NormalDist().inv_cdf(level)
    pooled = math.sqrt((b.var(ddof=1) * (len(b) - 1) + c.var(ddof=1) * (len(c) - 1)) / (len(b) + len(c) - 2))
    d = (mc - mb) / pooled if pooled > 0 else (math.inf if mc != mb else 0.0)
    return DiffStats(observed, (rel - observed) * widen, len(b), len(c), d)

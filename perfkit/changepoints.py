"""Change points in a series: e-divisive means, and the drift of a level's windows.

E-divisive means: change points by energy statistics with a permutation test.

The method of Matteson & James, "A Nonparametric Approach for Multiple Change Point Analysis
of Multivariate Data" (JASA 109(505), 2014; arXiv:1306.4933), in the "means" form MongoDB
uses for its CI performance history (Daly et al., "The Use of Change Point Detection to
Identify Software Performance Regressions in a Continuous Integration System", ICPE 2020)
and that Hunter/Otava build on: the series is split where the energy distance between the
part before and the part after is largest, the split is kept when a permutation test says so
(p <= alpha), and the parts are split again, the strongest split first.

Written here (numpy only) rather than imported: the `signal-processing-algorithms` package pins
gevent<25 and setuptools<71, which conflicts with tritonclient[all] (geventhttpclient needs
gevent>=25.9) and hdrhistogram. Seeded, so a history's verdict is a pure function of its runs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from perfkit.records import Drift, Window


@dataclass(frozen=True)
class Split:
    """One accepted split: the index of the first point after the change, its statistic and p-value."""

    index: int
    q_hat: float
    p_value: float


def _q_hat(x: np.ndarray, min_size: int) -> tuple[int, float]:
    """The best split of x (index of the first point of the second part) and its statistic.

    Q(tau) = tau (n - tau) / n * (2 mean|A-B| - mean|A-A'| - mean|B-B'|) for A = x[:tau],
    B = x[tau:], alpha = 1; every tau at once from a 2-D prefix sum of the distance matrix.
    """
    n = len(x)
    if n < 2 * min_size:
        return -1, 0.0
    d = np.abs(x[:, None] - x[None, :])
    p = np.zeros((n + 1, n + 1))
    p[1:, 1:] = d.cumsum(0).cumsum(1)
    tau = np.arange(min_size, n - min_size + 1)
    left = p[tau, tau]  # sum over A x A (both orders)
    cross = p[tau, n] - left  # sum over A x B
    right = p[n, n] - 2 * p[tau, n] + left  # sum over B x B
    m = n - tau
    within_a = np.where(tau > 1, left / np.maximum(tau * (tau - 1), 1), 0.0)
    within_b = np.where(m > 1, right / np.maximum(m * (m - 1), 1), 0.0)
    energy = 2 * cross / (tau * m) - within_a - within_b
    q = tau * m / n * energy
    best = int(np.argmax(q))
    return int(tau[best]), float(q[best])


def e_divisive(
    values: np.ndarray | list[float],
    *,
    alpha: float = 0.01,
    permutations: int = 199,
    min_size: int = 3,
    seed: int = 0,
) -> list[Split]:
    """Change points of a series, strongest first tested, returned in index order.

    A split is accepted when the share of permutations of its segment whose best statistic
    is at least the observed one, (k + 1) / (permutations + 1), is <= alpha.
    """
    x = np.asarray(values, dtype=float)
    if x.ndim != 1:
        raise ValueError("e_divisive takes a 1-D series")
    rng = np.random.default_rng(seed)
    bounds = [0, len(x)]
    found: list[Split] = []
    while True:
        best: tuple[float, int, int, int] | None = None  # q, tau (absolute), segment start, end
        for a, b in zip(bounds[:-1], bounds[1:]):
            tau, q = _q_hat(x[a:b], min_size)
            if tau > 0 and (best is None or q > best[0]):
                best = (q, a + tau, a, b)
        if best is None or best[0] <= 0:
            break
        q, tau, a, b = best
        segment = x[a:b]
        at_least = sum(_q_hat(rng.permutation(segment), min_size)[1] >= q for _ in range(permutations))
        p_value = (at_least + 1) / (permutations + 1)
        if p_value > alpha:
            break
        found.append(Split(tau, q, p_value))
        bounds = sorted([*bounds, tau])
    return sorted(found, key=lambda s: s.index)


DRIFT_MIN_WINDOWS = 5  # the fewest windows a drift is looked for in (2 either side of a change, and one more)
DRIFT_ALPHA = 0.002  # per look; a level looks after every window from the 5th: ~2% false stops over 10
DRIFT_MIN_SEGMENT = 2


def _betacf(a: float, b: float, x: float) -> float:
    # Lentz's continued fraction of the incomplete beta function (Numerical Recipes 6.4)
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-12:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0 or x >= 1.0:
        return 0.0 if x <= 0.0 else 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, dof: float) -> float:
    """P(|T| >= |t|) for Student's t with dof degrees of freedom."""
    if not math.isfinite(t):
        return 0.0
    return _betainc(dof / 2.0, 0.5, dof / (dof + t * t))


def largest_shift(
    values: Sequence[float] | np.ndarray, *, min_size: int = DRIFT_MIN_SEGMENT
) -> tuple[int, float, float, float] | None:
    """The change in level of a short series: (index of the first value after it, mean before,
    mean after, p-value); None below 2 * min_size + 1 values or with a value <= 0.

    The split is e-divisive's (the largest energy statistic); its significance a pooled two-sample
    t test on the logs (a relative change; windows of a steady process are alike either side),
    Bonferroni-corrected for the splits it was chosen among. A permutation test (e_divisive's)
    cannot reach p <= 0.01 below 10 values: a level's window series needs this one.
    """
    x = np.asarray(values, dtype=float)
    n = x.size
    if n < 2 * min_size + 1 or not np.all(x > 0):
        return None
    tau, _ = _q_hat(x, min_size)
    logs = np.log(x)
    a, b = logs[:tau], logs[tau:]
    dof = n - 2
    pooled = (float(((a - a.mean()) ** 2).sum()) + float(((b - b.mean()) ** 2).sum())) / dof
    diff = float(b.mean() - a.mean())
    se = math.sqrt(pooled * (1 / a.size + 1 / b.size))
    p = t_two_sided_p(diff / se, dof) if se > 0 else 0.0 if diff else 1.0
    p = min(1.0, p * (n - 2 * min_size + 1))
    return tau, float(x[:tau].mean()), float(x[tau:].mean()), p


def linear_trend(values: Sequence[float] | np.ndarray) -> tuple[float, float, float] | None:
    """A steady slope across a short series: (fitted first value, fitted last value, p-value of the
    slope, a t test on the logs); None below 2 * DRIFT_MIN_SEGMENT + 1 values or with a value <= 0.

    A trend spreads its change over every window, so no one split of it stands out early.
    """
    x = np.asarray(values, dtype=float)
    n = x.size
    if n < 2 * DRIFT_MIN_SEGMENT + 1 or not np.all(x > 0):
        return None
    logs = np.log(x)
    i = np.arange(n, dtype=float) - (n - 1) / 2.0
    slope = float(i @ (logs - logs.mean()) / (i @ i))
    resid = logs - logs.mean() - slope * i
    se = math.sqrt(float(resid @ resid) / (n - 2) / float(i @ i))
    p = t_two_sided_p(slope / se, n - 2) if se > 0 else 0.0 if slope else 1.0
    mid = float(logs.mean())
    return math.exp(mid + slope * i[0]), math.exp(mid + slope * i[-1]), p


def latency_metric(percentile: float | None) -> str:
    """The name of the per-window latency statistic a level is judged on: "mean" or "p99"."""
    if percentile is None:
        return "mean"
    return "p999" if float(percentile) == 99.9 else f"p{percentile:g}"


def window_series(windows: Sequence[Window], metric: str) -> list[float] | None:
    """A metric's per-window values ("throughput", "mean", "p50".."p999"); None when the windows
    did not keep it. Windows with nothing completed are left out (they have no latency)."""
    kept = [w for w in windows if w.completed > 0]
    if metric == "throughput":
        return [w.infer_per_s for w in kept]
    if metric == "mean":
        return [w.mean_us for w in kept]
    pct = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "p999": 99.9}.get(metric)
    if pct is None:
        return None
    values = [w.percentile_us(pct) for w in kept]
    return None if any(v is None for v in values) else [float(v) for v in values if v is not None]


def window_drift(
    windows: Sequence[Window], min_rel: Mapping[str, float], *, alpha: float = DRIFT_ALPHA
) -> Drift | None:
    """The largest material drift across a level's windows, over the metrics in min_rel.

    A metric drifts when its window series has a change point (largest_shift, p <= alpha: windows of
    a steady process are alike, so a split this strong is rare by chance) and the means either side
    differ by at least min_rel[metric] (relative): a shift smaller than the precision asked for
    does not stop a level. A trend shows as a split too.
    """
    found: Drift | None = None
    for metric, least in min_rel.items():
        series = window_series(windows, metric)
        if series is None:
            continue
        shift, trend = largest_shift(series), linear_trend(series)
        candidates = []
        if shift is not None:  # each test at alpha / 2: two looks at one series
            candidates.append(Drift(metric, shift[0], shift[1], shift[2], shift[3]))
        if trend is not None:
            candidates.append(Drift(metric, 0, trend[0], trend[1], trend[2], kind="trend"))
        for d in candidates:
            size = abs(math.log(d.after / d.before))
            if d.p_value > alpha / 2 or size < math.log1p(least):
                continue
            if found is None or size > abs(math.log1p(found.rel_change)):
                found = d
    return found


def describe_drift(drift: Drift, windows: int) -> str:
    """One line: what moved, by how much, from which window."""
    unit = " infer/s" if drift.metric == "throughput" else " ms"
    scale = 1.0 if drift.metric == "throughput" else 1e-3
    direction = "rose" if drift.after > drift.before else "fell"
    where = (
        f"from window {drift.at_window + 1} of {windows}"
        if drift.kind == "shift"
        else f"steadily over {windows} windows"
    )
    return (
        f"{drift.metric} {direction} {drift.before * scale:.4g} -> {drift.after * scale:.4g}{unit} "
        f"({drift.rel_change:+.0%}) {where} ({_p_text(drift.p_value)})"
    )


def _p_text(p: float) -> str:
    # Below 0.001 the exact figure depends on the statistics library's numerics (a shift with no noise
    # reads 0 in one release, 2e-107 in another) and says nothing more.
    return f"p={p:.2g}" if p >= 0.001 else "p<0.001"

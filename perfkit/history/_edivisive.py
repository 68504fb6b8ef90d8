"""E-divisive means: change points in a series by energy statistics with a permutation test.

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

from dataclasses import dataclass

import numpy as np


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

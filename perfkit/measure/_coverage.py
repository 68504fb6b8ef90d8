"""Whether stated intervals hold up under repetition: the coverage of one run's interval by others,
its nominal rate, and the between-run spread that a run's own windows cannot see.

Two runs of the same level give two estimates X_i, X_j of the same quantity, each with its own
error. "X_j lies inside run i's ~95% interval" is NOT a 95% event even for exact intervals: X_j - X_i
has sqrt(2) times one run's spread, so with normal errors the rate is P(|Z| <= 1.96 / sqrt(2)) =
2 Phi(1.386) - 1 = 83.4%. "|X_j - X_i| <= sqrt(h_i^2 + h_j^2)" (the combined interval) is the 95%
event. Both are reported by benchmarks/stopping_and_drift.py.

On a shared machine runs differ by more than their own windows show: the machine's state (other
jobs, caches, frequency) changes between runs and stays put within one. That is a between-run
variance component (random effects): X_run = mu + b_run + e_run, b_run ~ (0, tau^2), e_run the
within-run error the run's interval states. tau is estimated from repeated runs (DerSimonian-Laird,
on log figures, so it is relative) and added in quadrature to every stated interval.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from perfkit.records import Precision

Z95 = 1.959964

# The between-run relative sd of a level's figures on a shared machine, past what the runs' own
# intervals state: (throughput, latency statistic). Calibrated with benchmarks/stopping_and_drift.py
# --only coverage on a shared machine, quiet and with a competing CPU load (docs/benchmarks.md): the
# values that bring the share of runs whose figure lies inside another run's re-run interval to its
# nominal 83.4% over the sets (the machine's between-run spread itself moves from one quarter hour
# to the next). No number of windows in one run can see it.
BETWEEN_RUN_REL = (0.15, 0.30)


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


NOMINAL_INSIDE_OTHER = 2.0 * _phi(Z95 / math.sqrt(2.0)) - 1.0  # 0.834
NOMINAL_COMBINED = 0.95


@dataclass(frozen=True)
class Coverage:
    """Coverage of repeated runs' stated intervals over every ordered pair of runs."""

    inside_other: float  # share of pairs (i, j) with X_j inside run i's interval (nominal 83.4%)
    combined: float  # share with |X_j - X_i| <= sqrt(h_i^2 + h_j^2) (nominal 95%)
    pairs: int
    runs: int


def pair_coverage(figures: Sequence[tuple[float, float]]) -> Coverage:
    """Coverage over (figure, relative ~95% half-width) of repeated runs of one level."""
    inside = combined = n = 0
    for (xi, hi), (xj, hj) in itertools.permutations(figures, 2):
        n += 1
        inside += abs(xj - xi) <= hi * xi
        combined += abs(xj - xi) <= math.hypot(hi * xi, hj * xj)
    return Coverage(inside / max(n, 1), combined / max(n, 1), n, len(figures))


def between_run_rel(figures: Sequence[tuple[float, float]]) -> float:
    """The between-run relative standard deviation tau (DerSimonian-Laird, on logs) of repeated runs'
    (figure, relative ~95% half-width): the spread of the runs past what their own intervals state.
    0.0 when the runs agree within their intervals, or with fewer than 3 runs."""
    pts = [(math.log(x), h / Z95) for x, h in figures if x > 0 and h > 0]
    k = len(pts)
    if k < 3:
        return 0.0
    w = [1.0 / (s * s) for _, s in pts]
    sw = sum(w)
    mean = sum(wi * y for wi, (y, _) in zip(w, pts)) / sw
    q = sum(wi * (y - mean) ** 2 for wi, (y, _) in zip(w, pts))
    c = sw - sum(wi * wi for wi in w) / sw
    tau2 = max(0.0, (q - (k - 1)) / c) if c > 0 else 0.0
    return math.sqrt(tau2)


def widened_rel(rel: float | None, tau_rel: float) -> float | None:
    """A within-run ~95% relative half-width with a between-run relative sd tau added in quadrature."""
    if rel is None:
        return None
    return math.hypot(rel, Z95 * tau_rel)


def rerun_precision(precision: Precision, between_run_rel: tuple[float, float] = BETWEEN_RUN_REL) -> Precision:
    """The precision with its re-run half-widths: the within-run ones with the machine's between-run
    relative sd (throughput's, latency's) added in quadrature; the within-run ones kept as they are."""
    tput_tau, lat_tau = between_run_rel
    return dataclasses.replace(
        precision,
        throughput_rerun_rel=widened_rel(precision.throughput_rel, tput_tau),
        latency_rerun_rel=widened_rel(precision.latency_rel, lat_tau),
    )

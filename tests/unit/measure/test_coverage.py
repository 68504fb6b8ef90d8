"""The coverage of stated intervals under repetition, on synthetic runs whose between-window
autocorrelation and between-run variance are known: the within-run interval (batch means with
the AR(1) widening) covers at its nominal rate when runs differ only by their windows' noise; a
between-run component it cannot see makes it undercover, and adding that component back restores
the nominal rate. The nominal rate of "another run's figure inside this run's interval" is 83.4%,
not 95%."""

from __future__ import annotations

import math
from collections.abc import Callable
from statistics import NormalDist

import numpy as np
import pytest

from perfkit.measure._coverage import (
    NOMINAL_INSIDE_OTHER,
    between_run_rel,
    pair_coverage,
    rerun_precision,
    widened_rel,
)
from perfkit.recorder import mean_ci_rel, t95
from perfkit.records import Precision

RUNS, WINDOWS = 160, 12
WINDOW_SD, RHO = 0.05, 0.5  # each window's relative noise, and its lag-1 autocorrelation


def _plain_t(values: np.ndarray) -> float:
    """A t-interval that takes windows as independent: the control."""
    return t95(values.size - 1) * float(values.std(ddof=1)) / math.sqrt(values.size) / float(values.mean())


def _runs(
    tau: float, seed: int, interval: Callable[[np.ndarray], float | None] = mean_ci_rel
) -> list[tuple[float, float]]:
    """(figure, stated relative ~95% half-width) of repeated runs: windows an AR(1) series around
    1000 x exp(b), b ~ N(0, tau^2) drawn once per run."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(RUNS):
        level = 1000.0 * math.exp(rng.normal(0.0, tau))
        e = np.empty(WINDOWS)
        e[0] = rng.normal(0.0, WINDOW_SD)
        for i in range(1, WINDOWS):  # stationary AR(1): the same marginal sd every window
            e[i] = RHO * e[i - 1] + rng.normal(0.0, WINDOW_SD * math.sqrt(1 - RHO * RHO))
        windows = level * (1.0 + e)
        rel = interval(windows)
        assert rel is not None
        out.append((float(windows.mean()), rel))
    return out


def test_the_nominal_rate_of_another_runs_figure_inside_an_interval_is_83_percent():
    # X_j - X_i has sqrt(2) x one run's sd: P(|Z| <= 1.96 / sqrt(2))
    assert math.isclose(NOMINAL_INSIDE_OTHER, 2 * NormalDist().cdf(1.959964 / math.sqrt(2)) - 1, abs_tol=1e-6)
    assert 0.833 < NOMINAL_INSIDE_OTHER < 0.835


def test_autocorrelated_windows_alone_are_covered_at_about_the_nominal_rate():
    cov = pair_coverage(_runs(0.0, seed=1))
    # the AR(1)-widened batch-means interval, t at the effective windows: close to nominal, a little
    # under it (12 windows estimate a lag-1 correlation of 0.5 low: 92% combined, not 95%)
    assert 0.75 <= cov.inside_other <= 0.95, cov
    assert 0.90 <= cov.combined <= 0.99, cov
    plain = pair_coverage(_runs(0.0, seed=1, interval=_plain_t))  # the control: windows taken as independent
    assert plain.combined < 0.85 and plain.inside_other < 0.70, plain
    assert between_run_rel(_runs(0.0, seed=2)) < 0.01


def test_a_between_run_spread_undercovers_until_it_is_added_back():
    tau = 0.08  # the machine's state moves each run's level by 8% (sd): more than its windows' error
    runs = _runs(tau, seed=3)
    within = pair_coverage(runs)
    assert within.inside_other < 0.6 and within.combined < 0.75, within
    estimated = between_run_rel(runs)
    assert estimated == pytest.approx(tau, rel=0.25)
    # about nominal (a little over: the within-run part is a t-interval at few effective windows)
    widened = pair_coverage([(x, widened_rel(h, tau) or 0.0) for x, h in runs])
    assert NOMINAL_INSIDE_OTHER - 0.04 <= widened.inside_other <= NOMINAL_INSIDE_OTHER + 0.08, widened
    assert 0.93 <= widened.combined <= 0.99, widened
    # calibrated on one set of runs, it holds on a fresh one
    fresh = pair_coverage([(x, widened_rel(h, estimated) or 0.0) for x, h in _runs(tau, seed=4)])
    assert NOMINAL_INSIDE_OTHER - 0.06 <= fresh.inside_other <= NOMINAL_INSIDE_OTHER + 0.12, fresh
    assert fresh.combined >= 0.92, fresh


def test_a_levels_rerun_precision_adds_the_between_run_spread_and_keeps_the_within_run_one():
    p = rerun_precision(Precision(0.02, None, "batch-means"), (0.10, 0.25))
    assert (p.throughput_rel, p.latency_rel, p.method) == (0.02, None, "batch-means")
    assert p.throughput_rerun_rel == pytest.approx(math.hypot(0.02, 1.959964 * 0.10))
    assert p.latency_rerun_rel is None

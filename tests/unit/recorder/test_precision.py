"""The stopping rule's statistics on synthetic series: its intervals must mean what they claim."""

from __future__ import annotations

import math

import numpy as np
import pytest

from perfkit.recorder import (
    LevelRecorder,
    lag1_autocorrelation,
    mean_ci_rel,
    quantile_ci_rel,
    sectioned_quantile_ci_rel,
    t95,
)
from perfkit.records import Samples

MS = 1_000_000
TRUE_MEAN = 100.0


def _series(rho: float, n: int, reps: int, seed: int) -> np.ndarray:
    """reps AR(1) series of n windows, mean 100, sd 10 (rho = lag-1 correlation)."""
    rng = np.random.default_rng(seed)
    e = rng.standard_normal((reps, n + 30))
    x = np.zeros_like(e)
    for i in range(1, e.shape[1]):
        x[:, i] = rho * x[:, i - 1] + math.sqrt(1 - rho * rho) * e[:, i]
    return TRUE_MEAN + 10 * x[:, 30:]


def _coverage(series: np.ndarray, half_rel) -> float:
    hits = [abs(s.mean() - TRUE_MEAN) <= half_rel(s) * s.mean() for s in series]
    return float(np.mean(hits))


def _plain_t(s: np.ndarray) -> float:
    return t95(s.size - 1) * s.std(ddof=1) / math.sqrt(s.size) / s.mean()


def test_t_quantiles():
    assert t95(1) == pytest.approx(12.706) and t95(10) == pytest.approx(2.228) and t95(30) == pytest.approx(2.042)
    assert t95(1e9) == pytest.approx(1.96, abs=1e-3) and math.isinf(t95(0.5))
    qs = [t95(d) for d in (1, 1.5, 2, 3, 7.5, 20, 100)]
    assert qs == sorted(qs, reverse=True)


def test_independent_windows_get_their_nominal_coverage():
    series = _series(0.0, 10, 3000, seed=1)
    assert 0.93 <= _coverage(series, mean_ci_rel) <= 0.99


@pytest.mark.parametrize("rho", [0.5, 0.7])
def test_drifting_windows_widen_the_interval_instead_of_overclaiming(rho):
    series = _series(rho, 20, 3000, seed=2)
    plain = _coverage(series, _plain_t)
    ours = _coverage(series, mean_ci_rel)
    assert plain < 0.80  # a plain t-interval claims 95% and delivers far less: the control
    assert ours >= 0.86 and ours - plain >= 0.12


def test_lag1_autocorrelation_needs_four_windows_and_sees_a_trend():
    assert lag1_autocorrelation([1.0, 2.0, 3.0]) is None
    assert lag1_autocorrelation([5.0] * 6) is None
    trend = lag1_autocorrelation(np.linspace(90, 110, 12))
    alternating = lag1_autocorrelation([90.0, 110.0] * 6)
    assert trend is not None and trend > 0.6
    assert alternating is not None and alternating < -0.8


def test_sectioning_sees_a_percentile_that_drifts_between_windows():
    rng = np.random.default_rng(3)
    steady = [rng.normal(1000, 50, 2000) for _ in range(6)]
    drifting = [rng.normal(1000 + 150 * k, 50, 2000) for k in range(6)]
    calm, moving = sectioned_quantile_ci_rel(steady, 99), sectioned_quantile_ci_rel(drifting, 99)
    assert calm is not None and moving is not None and moving > 5 * calm
    assert sectioned_quantile_ci_rel([rng.normal(1000, 50, 500) for _ in range(6)], 99) is None  # 5 beyond p99


def test_level_precision_reports_the_wider_percentile_interval_under_drift():
    """20k closed-loop requests over 10 windows: latency steps up half way through the level."""
    n = 20_000
    sent = np.arange(n, dtype=np.int64) * (MS // 2)
    service = np.where(np.arange(n) < n // 2, 1.0, 1.6) * MS + (np.arange(n) % 7) * 10_000
    rec = LevelRecorder(start_ns=0, window_ns=1000 * MS, closed_loop=True, batch_size=1)
    rec.add(Samples(np.full(n, -1, dtype=np.int64), sent, sent + service.astype(np.int64), np.zeros(n, np.int32)))
    end = 10_000 * MS
    windows = rec.windows(10)
    p = rec.precision(windows, end, 90.0)
    order_only = quantile_ci_rel(np.sort(rec.latencies_us(end, "service")), 90.0)
    assert order_only is not None and p.latency_rel is not None
    assert p.latency_rel > 10 * order_only  # independent-sample maths would claim a far tighter p90
    assert p.throughput_rel is not None and p.throughput_rel < 0.01  # completions per window are steady


def test_identical_window_counts_do_not_claim_a_zero_interval():
    """3 windows of exactly 100 completions each: the counts agree by chance of the phase, but the
    latencies (CV 0.5) say a window's count could be off by about 5%."""
    per = 100
    sent = np.concatenate([k * 1000 * MS + np.arange(per) * 10 * MS for k in range(3)]).astype(np.int64)
    service = np.tile(np.where(np.arange(per) % 2 == 0, 1 * MS, 3 * MS), 3)  # mean 2 ms, CV 0.5
    rec = LevelRecorder(start_ns=0, window_ns=1000 * MS, closed_loop=True, batch_size=1)
    rec.add(Samples(np.full(sent.size, -1, dtype=np.int64), sent, sent + service, np.zeros(sent.size, np.int32)))
    windows = rec.windows(3)
    assert [w.completed for w in windows] == [per] * 3
    p = rec.precision(windows, 3000 * MS, None)
    expected = t95(2) * 0.5 / math.sqrt(per) / math.sqrt(3)
    assert p.throughput_rel == pytest.approx(expected, rel=0.01)
    assert mean_ci_rel([100.0, 100.0, 100.0]) == 0.0  # without the floor a lucky trio claims perfection


def test_a_thin_percentile_has_no_interval_so_the_level_keeps_measuring():
    lat = np.sort(np.random.default_rng(4).normal(1000, 30, 900))  # 9 samples beyond p99
    assert quantile_ci_rel(lat, 99.0) is None
    assert quantile_ci_rel(lat, 95.0) is not None  # 45 beyond p95
    more = np.sort(np.random.default_rng(4).normal(1000, 30, 1000))  # 10 beyond p99
    assert quantile_ci_rel(more, 99.0) is not None

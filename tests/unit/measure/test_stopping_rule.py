"""The level loop's stopping rule on synthetic windows (a fake clock, no server, no sleeps).

A steady process runs until its precision is reached; a process whose figures move across
windows (a shift, a trend) ends early, flagged with the drift found, every window kept.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from perfkit.changepoints import describe_drift, window_drift
from perfkit.measure import _level, _stopping
from perfkit.records import LoadLevel, ProfileSpec, Samples, Window
from tests.support.stand_in_server import StandInServer

WINDOW_MS = 1000.0
RATE_RPS = 400  # requests completed per window-second, closed loop


class FakeClock:
    def __init__(self) -> None:
        self.now_ns = 10_000_000_000

    def sleep_until(self, t_ns: int) -> None:
        self.now_ns = max(self.now_ns, t_ns)


class FakeGen:
    """Closed-loop samples up to the fake clock: latency (us) = base(second) x lognormal noise."""

    def __init__(self, clock: FakeClock, latency_us: Callable[[float], float], seed: int = 0) -> None:
        self.clock, self.latency_us = clock, latency_us
        self.rng = np.random.default_rng(seed)
        self.t0 = 0
        self.made_to = 0

    def start(self, level: LoadLevel) -> int:
        self.t0 = self.made_to = self.clock.now_ns
        return self.t0

    def _until(self, end_ns: int) -> Samples:
        n = int((end_ns - self.made_to) / 1e9 * RATE_RPS)
        sent = np.sort(self.rng.integers(self.made_to, end_ns, size=n)).astype(np.int64)
        base = np.array([self.latency_us((t - self.t0) / 1e9) for t in sent])
        lat_ns = (base * self.rng.lognormal(0.0, 0.25, size=n) * 1e3).astype(np.int64)
        self.made_to = end_ns
        return Samples(np.full(n, -1, np.int64), sent, sent + lat_ns, np.zeros(n, np.int32))

    def drain(self) -> Samples:
        return self._until(self.clock.now_ns)

    def stop(self, drain_timeout_s: float = 30.0) -> Samples:
        return self._until(self.clock.now_ns)


def _run(monkeypatch: pytest.MonkeyPatch, latency_us: Callable[[float], float], **spec_kw: object):
    clock = FakeClock()
    monkeypatch.setattr(_level, "sleep_until", clock.sleep_until)
    monkeypatch.setattr(_level, "perf_counter_ns", lambda: clock.now_ns)
    level = LoadLevel("concurrency", 4)
    kw = {"measurement_interval_ms": WINDOW_MS, "warmup_s": 0.0, "tail_percentiles": (), **spec_kw}
    spec = ProfileSpec(model="m", levels=(level,), **kw)  # type: ignore[arg-type]  # test kwargs
    server = StandInServer(keeps_stats=False)
    return _level.measure_level(server, FakeGen(clock, latency_us), spec, level, ["m"], None).result  # type: ignore[arg-type]  # a stand-in generator


def test_a_steady_level_runs_until_precise(monkeypatch):
    r = _run(monkeypatch, lambda t: 2000.0, percentile=99.0, stability_percentage=5.0, max_trials=30)
    assert r.stable and r.drift is None
    assert r.precision.latency_rel is not None and r.precision.latency_rel <= 0.05
    assert len(r.windows) >= 3 and "drifted" not in r.note


def test_a_level_whose_latency_shifts_ends_early_with_its_reason(monkeypatch):
    # the machine gets busier 3 s in: latency x2.5; a precision of +-1% would take far more windows
    r = _run(monkeypatch, lambda t: 1500.0 if t < 3.0 else 3750.0, percentile=99.0, stability_percentage=1.0,
             max_trials=30, min_windows=5)  # fmt: skip
    assert not r.stable
    assert r.drift is not None and r.drift.metric in ("p99", "throughput") and r.drift.kind == "shift"
    assert len(r.windows) == 5  # ended at the first window the change point could be certified
    assert r.drift.at_window == 3  # the first window after the change
    assert r.drift.after / r.drift.before > 2.0 if r.drift.metric == "p99" else r.drift.after < r.drift.before
    assert r.note.startswith("ended early, the windows drifted: ")
    assert "precision reached" in r.note and "from window 4 of 5" in r.note
    assert [w.start_s for w in r.windows] == [float(i) for i in range(len(r.windows))]  # every window kept


def test_a_trend_ends_early_too(monkeypatch):
    r = _run(monkeypatch, lambda t: 1000.0 * (1 + 0.25 * t), percentile=99.0, stability_percentage=1.0,
             max_trials=30, min_windows=5)  # fmt: skip
    assert r.drift is not None and r.drift.kind == "trend" and not r.stable and len(r.windows) == 5
    assert "steadily over 5 windows" in r.note


def test_a_steady_level_that_cannot_get_precise_in_its_budget_ends_early_saying_so(monkeypatch):
    # +-0.5% on p99 would take hundreds of windows of 400 requests: nothing moves, but more windows
    # in the time given cannot make it precise
    r = _run(monkeypatch, lambda t: 2000.0, percentile=99.0, stability_percentage=0.5, max_trials=30)
    assert not r.stable and r.drift is None and len(r.windows) == 5
    assert r.note.startswith("ended early: the precision asked would take about ")
    assert "past the level's budget of 10" in r.note and "precision reached" in r.note
    r = _run(monkeypatch, lambda t: 2000.0, percentile=99.0, stability_percentage=0.5, min_windows=7)
    assert len(r.windows) == 7  # never before min_windows


def test_an_imprecise_steady_level_ends_at_its_time_budget(monkeypatch):
    monkeypatch.setattr(_stopping, "FUTILITY_FACTOR", math.inf)  # the budget alone
    r = _run(monkeypatch, lambda t: 2000.0, percentile=99.0, stability_percentage=0.5, max_trials=30)
    assert not r.stable and r.drift is None and len(r.windows) == 10  # 10 windows' worth by default
    r = _run(monkeypatch, lambda t: 2000.0, percentile=99.0, stability_percentage=0.5, max_trials=30,
             level_budget_s=4.0)  # fmt: skip
    assert len(r.windows) == 4
    r = _run(monkeypatch, lambda t: 2000.0, percentile=99.0, stability_percentage=0.5, max_trials=14,
             level_budget_s=0.0)  # fmt: skip
    assert len(r.windows) == 14  # no budget: windows until --max-trials


def test_the_budget_waits_for_the_tail_samples(monkeypatch):
    monkeypatch.setattr(_stopping, "FUTILITY_FACTOR", math.inf)
    # 400 requests a window: p99.9 needs 10,000 (10 beyond it), reached after 25 windows
    r = _run(monkeypatch, lambda t: 2000.0, percentile=99.0, stability_percentage=0.5, max_trials=30,
             tail_percentiles=(99.9,))  # fmt: skip
    assert len(r.windows) == 25


def test_drift_waits_for_the_tail_samples(monkeypatch):
    # 400 requests a window: p99.9 needs 10,000, so the drift seen from window 5 ends the level at 25
    r = _run(monkeypatch, lambda t: 1500.0 if t < 3.0 else 3750.0, percentile=99.0, stability_percentage=1.0,
             min_windows=5, tail_percentiles=(99.9,))  # fmt: skip
    assert r.drift is not None and len(r.windows) == 25
    assert "p999" not in r.service.thin


def test_drift_never_ends_a_level_before_min_windows(monkeypatch):
    r = _run(monkeypatch, lambda t: 1500.0 if t < 4.0 else 3750.0, percentile=99.0, stability_percentage=1.0,
             max_trials=14, min_windows=14)  # fmt: skip
    assert len(r.windows) == 14 and r.drift is not None
    assert r.note.startswith("the windows drifted")  # not "ended early": it ran its windows


def test_the_drift_field_round_trips_and_old_records_load(monkeypatch):
    r = _run(monkeypatch, lambda t: 1500.0 if t < 3.0 else 3750.0, percentile=99.0, stability_percentage=1.0,
             min_windows=5)  # fmt: skip
    assert r.drift is not None
    from perfkit.records import LevelResult, from_dict, to_dict

    data = to_dict(r)
    assert from_dict(LevelResult, data) == r
    del data["drift"]
    assert from_dict(LevelResult, data).drift is None  # records written before the field load


def _windows(values_tput: list[float], values_p99: list[float]) -> list[Window]:
    return [
        Window(float(i), 1.0, int(t), int(t), 0, t, p / 2, p, p / 1.5, p90_us=p / 1.2, p95_us=p / 1.1, p999_us=p * 1.5)
        for i, (t, p) in enumerate(zip(values_tput, values_p99))
    ]


def test_steady_windows_rarely_show_drift():
    # independent windows, looked at after every window from the 5th to the 10th as the level
    # loop does: few levels would end early by chance
    rng = np.random.default_rng(3)
    alarms = 0
    trials = 300
    for _ in range(trials):
        tput = list(1000 * (1 + 0.03 * rng.standard_normal(10)))
        p99 = list(5000 * (1 + 0.08 * rng.standard_normal(10)))
        wins = _windows(tput, p99)
        alarms += any(window_drift(wins[:k], {"throughput": 0.0, "p99": 0.0}) for k in range(5, 11))
    assert alarms / trials <= 0.03


def test_a_shift_smaller_than_the_precision_asked_does_not_count():
    tput = [1000.0] * 5 + [1030.0] * 5  # +3%: certain, but within a 5% target
    p99 = [5000.0] * 10
    assert window_drift(_windows(tput, p99), {"throughput": 0.05, "p99": 0.1}) is None
    d = window_drift(_windows(tput, p99), {"throughput": 0.02, "p99": 0.1})
    assert d is not None and d.at_window == 5 and math.isclose(d.rel_change, 0.03)
    assert describe_drift(d, 10) == "throughput rose 1000 -> 1030 infer/s (+3%) from window 6 of 10 (p<0.001)"

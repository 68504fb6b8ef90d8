"""perf_analyzer's stop rule (measure/_window_stability.py): per-window figures in, verdict out, against
cases computed by hand from its source (src/inference_profiler.cc: DetermineStability, IsDoneProfiling);
then the level loop ending by it, on a fake clock (no server, no sleeps)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from perfkit.measure import _level
from perfkit.measure._stopping import LevelStop, level_stop_rule
from perfkit.measure._window_stability import WindowStability, past_threshold, window_latency_us, windows_stable
from perfkit.records import LoadLevel, ProfileSpec, Window
from tests.support.stand_in_server import StandInServer
from tests.unit.measure.test_stopping_rule import FakeClock, FakeGen


def test_three_windows_within_the_percentage_are_stable():
    # max/min: throughput 105/100 = 1.05, latency 2100/2000 = 1.05 <= 1.10
    assert windows_stable([100, 105, 102], [2000, 2100, 2050], 10.0)


def test_fewer_than_three_windows_are_never_stable():
    assert not windows_stable([100, 100], [2000, 2000], 10.0)
    assert not windows_stable([], [], 100.0)


def test_the_bound_is_max_over_min_not_spread_about_the_mean():
    # 100 and 110: max/min = 1.10 exactly, within 10% (<=); 100 and 111 is 1.11, past it
    assert windows_stable([100, 110, 105], [1000, 1000, 1000], 10.0)
    assert not windows_stable([100, 111, 105], [1000, 1000, 1000], 10.0)
    # each within 10% of their mean (90, 100, 110: mean 100) but max/min = 1.22: unstable by perf_analyzer's rule
    assert not windows_stable([90, 100, 110], [1000, 1000, 1000], 10.0)


def test_latency_must_agree_too_unless_not_asked():
    assert not windows_stable([100, 100, 100], [1000, 1200, 1000], 10.0)  # 1.2 > 1.1
    assert windows_stable([100, 100, 100], [1000, 1200, 1000], 10.0, check_latency=False)
    assert windows_stable([100, 100, 100], [1000, 1200, 1000], 25.0)


def test_only_the_last_three_windows_count():
    # a slow first window (warming up) does not hold the level once three steady ones follow
    assert windows_stable([10, 100, 101, 102], [9000, 1000, 1001, 1002], 10.0)
    assert not windows_stable([100, 101, 102, 10], [1000, 1001, 1002, 9000], 10.0)


def test_a_window_that_completed_nothing_is_never_stable():
    assert not windows_stable([100, 0, 100], [1000, math.inf, 1000], 100.0)
    assert not windows_stable([100, 100, 100], [1000, math.inf, 1000], 100.0)


def test_the_latency_threshold_looks_at_the_last_three_windows_once_there_are_three():
    assert not past_threshold([20_000, 20_000], 10.0)  # two windows: not judged yet
    assert past_threshold([1000, 2000, 10_000], 10.0)  # at the threshold counts (perf_analyzer: not <)
    assert not past_threshold([50_000, 1000, 2000, 9999], 10.0)  # an old window past it does not
    assert not past_threshold([50_000, 50_000, 50_000], None)


def _window(completed: int, mean_us: float) -> Window:
    return Window(0.0, 1.0, completed, completed, 0, float(completed), mean_us, mean_us, mean_us)


def test_a_window_is_judged_by_its_average_or_its_percentile():
    lat = np.arange(1.0, 101.0)
    assert window_latency_us(_window(100, 50.5), lat, None) == 50.5
    assert window_latency_us(_window(100, 50.5), lat, 95.0) == pytest.approx(np.percentile(lat, 95.0))
    assert window_latency_us(_window(0, 0.0), np.array([]), None) == math.inf


def test_the_seam_picks_the_rule_the_spec_names():
    level = LoadLevel("concurrency", 1)
    spec = ProfileSpec(model="m", levels=(level,))
    none = lambda i: np.array([])  # noqa: E731
    assert isinstance(level_stop_rule(spec, True, decided_only=False, latencies_us=none), LevelStop)
    pa = ProfileSpec(model="m", levels=(level,), stop_rule="stability")
    assert isinstance(level_stop_rule(pa, True, decided_only=False, latencies_us=none), WindowStability)


def _run(monkeypatch, latency_us, level=None, **spec_kw):
    clock = FakeClock()
    monkeypatch.setattr(_level, "sleep_until", clock.sleep_until)
    monkeypatch.setattr(_level, "perf_counter_ns", lambda: clock.now_ns)
    level = level or LoadLevel("concurrency", 4)
    kw = {"measurement_interval_ms": 1000.0, "warmup_s": 0.0, "tail_percentiles": (), "stop_rule": "stability",
          **spec_kw}  # fmt: skip
    spec = ProfileSpec(model="m", levels=(level,), **kw)
    server = StandInServer(keeps_stats=False)
    return _level.measure_level(server, FakeGen(clock, latency_us), spec, level, ["m"], None).result


def test_a_steady_level_ends_after_three_windows_by_perf_analyzers_rule(monkeypatch):
    # 400 requests a window, lognormal noise: the average moves ~1.3% a window, within 10%
    r = _run(monkeypatch, lambda t: 2000.0, max_trials=10)
    assert r.stable and len(r.windows) == 3
    # perfkit's precision rule on the same windows asks more of them at -s 1 (its futility or budget ends it)
    p = _run(monkeypatch, lambda t: 2000.0, max_trials=10, stop_rule="precision", stability_percentage=1.0)
    assert len(p.windows) > 3


def test_a_level_whose_latency_keeps_moving_ends_unstable_at_max_trials(monkeypatch):
    # latency x1.25 every window: never three windows within 10%
    r = _run(monkeypatch, lambda t: 1000.0 * 1.25**t, max_trials=6)
    assert not r.stable and len(r.windows) == 6 and r.drift is None


def test_a_latency_past_the_threshold_ends_the_level(monkeypatch):
    r = _run(monkeypatch, lambda t: 1000.0 * 1.25**t, max_trials=10, latency_threshold_ms=1.0)
    assert not r.stable and len(r.windows) == 3


@pytest.mark.parametrize(
    ("argv", "rule"),
    [
        ([], "precision"),  # perfkit profile's own default
        (["-s", "100"], "stability"),  # perf_analyzer's stability flags, as perf_analyzer spells them
        (["-p500"], "stability"),
        (["--max-trials", "4"], "stability"),
        (["-s", "100", "--stop-rule", "precision"], "precision"),  # asked otherwise
        (["--stop-rule", "stability"], "stability"),
    ],
)
def test_the_command_line_chooses_the_rule_once(argv, rule):
    from perfkit.cli._stop_rule_option import stop_rule_of
    from perfkit.cli.profile import command

    with command.make_context("profile", ["-m", "m", *argv]) as ctx:
        assert stop_rule_of(dict(ctx.params)) == rule


def test_an_open_loop_level_whose_throughput_alone_settles_is_stable_with_a_note_at_max_trials():
    level = LoadLevel("request_rate", 100)
    spec = ProfileSpec(model="m", levels=(level,), stop_rule="stability", max_trials=4)
    wins = [_window(100, lat) for lat in (1000.0, 1300.0, 1700.0, 2200.0)]  # latency x1.3 a window
    lat_of = lambda i: np.full(100, wins[i].mean_us)  # noqa: E731
    kw = {"throughput_ok": False, "latency_ok": False, "tail_ok": False}
    rule = WindowStability(spec, open_loop=True, latencies_us=lat_of)
    assert not rule.ends_after(3, wins[:3], None, **kw)  # type: ignore[arg-type]  # the rule reads no precision
    assert rule.ends_after(4, wins, None, **kw) and rule.stable and rule.latency_unsteady  # type: ignore[arg-type]  # as above
    closed = WindowStability(spec, open_loop=False, latencies_us=lat_of)
    assert not closed.ends_after(4, wins, None, **kw) and not closed.stable  # type: ignore[arg-type]  # as above


def test_a_stable_level_waits_for_the_tail_samples_asked(monkeypatch):
    # 400 requests a window: p99.9 needs 10 beyond it (10,000 requests), reached after 25 windows
    r = _run(monkeypatch, lambda t: 2000.0, max_trials=30, tail_percentiles=(99.9,))
    assert r.stable and len(r.windows) == 25

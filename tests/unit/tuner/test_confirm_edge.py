"""A claim near the budget's edge: the percentile's bound is where a re-measurement as long as the
confirmation reads (perf_analyzer's merged stability window), more runs are made where only the
bound is over and they could bring it under, and the next rate tried is half a ladder step down
when every run read within the budget. Figures from hungry's confirmation (p99 <= 150 ms), whose
p99 rises slowly with the rate: 845 req/s read 147.2, 142.6 and 149.3 ms; 775 req/s read 139.3,
144.4 and 136.5 ms; perf_analyzer held 868 req/s at 147.7 ms."""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from perfkit.gate.synthetic import synthetic_level, synthetic_record
from perfkit.recorder import t95_one_sided
from perfkit.records import Budget, Drift, LoadLevel, Precision
from perfkit.tuner._claim_stats import cannot_hold, latency_bound_us, summarize_repeats
from perfkit.tuner._confirm import ConfirmSettings, confirm_one
from perfkit.tuner._find_load import TrialLoadSettings

BUDGET = Budget(150.0, 99.0, "latency")


def _level(rate: float, p99_ms: float, rel: float = 0.01):
    # synthetic_level's p99 is 1.3x its latency_ms
    lv = synthetic_level(concurrency=rate, latency_ms=p99_ms / 1.3, noise=0.0, open_loop=True)
    return dataclasses.replace(lv, load=LoadLevel("request_rate", rate, "poisson"), sent_rps=rate, completed_rps=rate,
                               duration_s=5.6, precision=Precision(0.02, rel))  # fmt: skip


def test_the_bound_is_where_a_re_measurement_as_long_as_the_confirmation_reads():
    at_775 = [139.26, 144.38, 136.45]
    bound = latency_bound_us([x * 1e3 for x in at_775], [0.0083, 0.0139, 0.011], repeats=3)
    # mean + t(0.95, 2) * s * sqrt(1/3 + 1/3): the re-measurement's own noise is that of 3 runs pooled
    expected = statistics.fmean(at_775) + t95_one_sided(2) * statistics.stdev(at_775) * math.sqrt(2 / 3)
    assert bound / 1e3 == pytest.approx(expected, rel=1e-9)
    assert bound < 150e3  # held: perf_analyzer read 135 ms at 727 req/s and 147.7 at 868
    # The bound for one more 5 s run (the old statement: sqrt(1 + 1/3)) was over: 153.6 ms
    assert statistics.fmean(at_775) + t95_one_sided(2) * statistics.stdev(at_775) * math.sqrt(4 / 3) > 150
    c = summarize_repeats(LoadLevel("request_rate", 775.0, "poisson"), [_level(775.0, x) for x in at_775], repeats=3,
                          budget=BUDGET)  # fmt: skip
    assert c.held and c.latency_ucb_us == pytest.approx(bound, rel=0.01)
    # 845 req/s sits on the edge: every run within 150 ms, the bound over it
    edge = [_level(845.0, x) for x in (147.2, 142.59, 149.25)]
    at_845 = summarize_repeats(LoadLevel("request_rate", 845.0, "poisson"), edge, repeats=3, budget=BUDGET)
    assert not at_845.held and at_845.latency_us < 150e3 < at_845.latency_ucb_us
    # Runs that agree by chance are floored by their own intervals, pooled
    agree = latency_bound_us([140e3, 140e3, 140e3], [0.10, 0.10, 0.10], repeats=3)
    assert agree == pytest.approx(140e3 * (1 + 1.645 / 1.96 * 0.10 * math.sqrt(2 / 3)), rel=1e-9)


def test_one_run_whose_own_interval_is_too_wide_for_the_bound_ends_the_repeats():
    assert cannot_hold(_level(845.0, 151.0), BUDGET, 3)  # over the budget
    assert not cannot_hold(_level(845.0, 148.0, rel=0.0136), BUDGET, 3)  # three alike could still hold
    assert cannot_hold(_level(845.0, 149.25, rel=0.0136), BUDGET, 3)  # three alike: 150.6 ms
    assert cannot_hold(_level(845.0, 140.0, rel=0.15), BUDGET, 3)  # 140 +- 15%: three alike could not


def _runner(tmp_path: Path, p99_ms: Callable[[float], float]) -> tuple[SimpleNamespace, list[float]]:
    """A stand-in runner (open loop, p99 <= 150 ms) whose every run at a rate reads p99_ms(rate),
    in turn; the rates measured go to the list returned."""
    measured: list[float] = []

    def measure(server, spec, *, command=(), record_path=None):
        rate = spec.levels[0].value
        measured.append(rate)
        return synthetic_record([_level(rate, p99_ms(rate))], model=spec.model)

    trial_load = TrialLoadSettings(budget=BUDGET, load_mode="rate", max_rate_rps=10_000.0)
    s = SimpleNamespace(command=(), budget=BUDGET)
    return SimpleNamespace(
        measure=measure, trial_load=trial_load, model="m", out_dir=tmp_path, s=s, server=None
    ), measured


def _readings(values: list[float]) -> Callable[[float], float]:
    it: Iterator[float] = iter(values)
    return lambda _rate: next(it)


CS = ConfirmSettings(repeats=3, min_windows=1, max_windows=1)


def test_more_runs_are_made_where_only_the_bound_is_over_and_they_could_bring_it_under(tmp_path: Path):
    # 146, 141, 147: the bound with 3 runs is over 150 ms, with 5 alike it would not be; so with 4 (147)
    t, measured = _runner(tmp_path, _readings([146.0, 141.0, 147.0, 147.0, 144.0, 140.0]))
    c = confirm_one(t, 1, t.trial_load.level(845.0), CS)  # type: ignore[arg-type]  # a stand-in with the runner's fields
    assert measured == [845.0] * 5
    assert c.held and c.repeats == 5 and c.load.value == 845.0 and c.latency_ucb_us <= 150e3


def test_no_more_runs_where_they_could_not_help_and_the_next_rate_is_half_a_step_down(tmp_path: Path):
    # hungry at 845 req/s: its third run's own interval rules out 3 alike; 809 (845 / 2**(1/16)) holds
    def p99(rate: float) -> float:
        return next(edge) if rate == 845.0 else {809.0: 140.0}[rate]

    edge = iter([147.2, 142.59, 149.25])
    t, measured = _runner(tmp_path, p99)
    c = confirm_one(t, 1, t.trial_load.level(845.0), CS)  # type: ignore[arg-type]  # a stand-in with the runner's fields
    assert measured == [845.0] * 3 + [809.0] * 3
    assert c.held and c.load.value == 809.0 and c.searched_load is not None and c.searched_load.value == 845.0
    assert "half a step down" in c.note


def test_a_run_over_the_budget_steps_a_whole_step_down(tmp_path: Path):
    t, measured = _runner(tmp_path, lambda rate: 160.0 if rate > 800 else 120.0)
    c = confirm_one(t, 1, t.trial_load.level(845.0), CS)  # type: ignore[arg-type]  # a stand-in with the runner's fields
    assert measured[0] == 845.0 and measured[1:] == [775.0] * 3  # 845 / 2**(1/8), on the ladder
    assert c.held and "half a step" not in c.note


def test_a_first_run_that_warmed_up_late_is_made_once_more_and_not_counted(tmp_path: Path):
    # onnx_mlp after a reload: a run's p99 fell part way through (its windows drifted down), so it
    # read over the budget on its first windows alone; the next run reads the settled config
    late = Drift("p99", 3, 250.0, 120.0, 1e-4)
    runs = iter([(170.0, late), (140.0, None), (141.0, None), (139.0, None)])

    def measure(server, spec, *, command=(), record_path=None):
        p99_ms, drift = next(runs)
        lv = dataclasses.replace(_level(spec.levels[0].value, p99_ms), drift=drift)
        return synthetic_record([lv], model=spec.model)

    t, _ = _runner(tmp_path, lambda rate: 0.0)
    t.measure = measure
    c = confirm_one(t, 1, t.trial_load.level(845.0), CS)  # type: ignore[arg-type]  # a stand-in with the runner's fields
    assert c.held and c.repeats == 3 and c.load.value == 845.0 and c.latency_us == pytest.approx(141e3, rel=0.01)
    assert len(list((tmp_path / "confirm").glob("trial-001-845-*.json"))) == 4  # the settling run kept on file

    # Only once, and only a fall: a run whose latency rose part way through is judged as it read
    for drifts in ([late, late], [Drift("p99", 3, 120.0, 250.0, 1e-4)]):
        runs = iter([(170.0, d) for d in drifts] + [(140.0, None)] * 3)
        t, _ = _runner(tmp_path / str(len(drifts)), lambda rate: 0.0)
        t.measure = measure
        c = confirm_one(t, 1, t.trial_load.level(845.0), CS, max_steps=0)  # type: ignore[arg-type]  # as above
        assert not c.held and c.repeats == 1 and "over the budget" in c.note


def _windowed(rate: float, p99s_ms: list[float], run_p99_ms: float):
    """A run read over windows with these p99s (the run's own p99 given: its requests together)."""
    from perfkit.records import Window

    lv = _level(rate, run_p99_ms)
    windows = tuple(Window(i * 0.8, 0.8, 7_000, 7_000, 0, 8_750.0, 2_000.0, p * 1e3, 3_000.0)
                    for i, p in enumerate(p99s_ms))  # fmt: skip
    return dataclasses.replace(lv, windows=windows, drift=None)


def test_a_first_run_whose_first_windows_read_far_over_the_rest_is_made_once_more(tmp_path: Path):
    """onnx_mlp's confirmation 2 s after a reload (p99 <= 20 ms, here scaled to 150): windows of
    31.5, 3.7, 6.9, 5.8, 6.3, 12.7 and 6.9 ms read 24.2 ms over the run, no drift found; the
    first window read over twice any after it. Made once more, the run reads the settled config
    and the rate holds. A spike later in a run is no settling: judged as it read."""
    from perfkit.tuner._claim_stats import settling_windows, warmed_up_late

    scale = 150.0 / 20.0
    onnx = [x * scale for x in (31.5, 3.7, 6.9, 5.8, 6.3, 12.7, 6.9)]
    first = _windowed(845.0, onnx, 24.2 * scale)
    assert settling_windows(first) == 1 and warmed_up_late(first)
    # three settling windows: 127.9, 135.6 and 47.3 ms, then 9.9, 8.7, 7.2 and 13.3
    assert settling_windows(_windowed(845.0, [127.9, 135.6, 47.3, 9.9, 8.7, 7.2, 13.3], 60.0)) == 3
    later = _windowed(845.0, [x * scale for x in (3.7, 6.9, 31.5, 5.8, 6.3, 12.7, 6.9)], 24.2 * scale)
    assert settling_windows(later) == 0 and not warmed_up_late(later)
    # within a factor of two of a later window: no settling either
    assert settling_windows(_windowed(845.0, [20.0, 11.0, 9.0, 10.0], 12.0)) == 0

    runs = iter([first] + [_windowed(845.0, [x * scale for x in (5.0, 6.0, 5.5, 6.2)], 140.0)] * 3)

    def measure(server, spec, *, command=(), record_path=None):
        return synthetic_record([next(runs)], model=spec.model)

    t, _ = _runner(tmp_path, lambda rate: 0.0)
    t.measure = measure
    c = confirm_one(t, 1, t.trial_load.level(845.0), CS)  # type: ignore[arg-type]  # a stand-in with the runner's fields
    assert c.held and c.repeats == 3 and c.load.value == 845.0
    assert len(list((tmp_path / "confirm").glob("trial-001-845-*.json"))) == 4  # the settling run kept on file


def test_one_run_within_the_budget_that_rules_its_rate_out_by_its_bound_alone_steps_half_a_step_down(tmp_path: Path):
    """hungry's predicted claim at 875 req/s: one run read p99 149.1 ms against 150 (its own
    interval ±1.4%), so three alike would put the bound at 150.6 and the rate was ruled out after
    that run; the claim then stepped a whole step to 802 req/s, and perf_analyzer held 921. Only
    the bound was over: the next rate is half a step down, 838 (875 / 2**(1/16)), which holds."""
    measured: list[float] = []

    def measure(server, spec, *, command=(), record_path=None):
        rate = spec.levels[0].value
        measured.append(rate)
        lv = _level(rate, 149.1, rel=0.014) if rate == 875.0 else _level(rate, 143.0)
        return synthetic_record([lv], model=spec.model)

    t, _ = _runner(tmp_path, lambda rate: 0.0)
    t.measure = measure
    assert cannot_hold(_level(875.0, 149.1, rel=0.014), BUDGET, 3)
    c = confirm_one(t, 1, t.trial_load.level(875.0), CS)  # type: ignore[arg-type]  # a stand-in with the runner's fields
    assert measured == [875.0] + [838.0] * 3, measured
    assert c.held and c.load.value == 838.0 and "half a step down" in c.note


def test_a_predicted_rate_below_the_steps_is_confirmed_before_the_candidate_is_demoted(tmp_path: Path):
    """stream_held at 3 instances (TTFT p99 <= 50 ms, here scaled to 150): the search's short level
    held 118 req/s, the simulator predicted 91; 7.5 s runs read over the budget at 118, 108 and 99.
    The steps end there; the predicted rate is confirmed last, and holds."""
    t, measured = _runner(tmp_path, lambda rate: 160.0 if rate > 95 else 130.0)
    c = confirm_one(t, 1, t.trial_load.level(118.0), CS, predicted_rps=91.3)  # type: ignore[arg-type]  # a stand-in
    assert measured == [118.0, 108.0, 99.0] + [91.3] * 3, measured
    assert c.held and c.load.value == 91.3 and "its predicted rate" in c.note
    assert c.searched_load is not None and c.searched_load.value == 118.0

    # Without a prediction (a measured search), or with one the steps reached, the candidate is demoted there
    for predicted in (None, 97.0):
        t, measured = _runner(tmp_path / str(predicted), lambda rate: 160.0 if rate > 95 else 130.0)
        c = confirm_one(t, 1, t.trial_load.level(118.0), CS, predicted_rps=predicted)  # type: ignore[arg-type]  # as above
        assert not c.held and measured == [118.0, 108.0, 99.0], measured

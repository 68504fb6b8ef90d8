"""One rule says whether a level is within budget (Budget.within: no errors, the percentile within
it, no open-loop shortfall), and the verdict and the load search both judge by it. measure's
stop rule is another, named for what it is: perf_analyzer's latency threshold
(over_latency_threshold, the percentile alone), which only ends a sweep."""

from __future__ import annotations

import dataclasses
import time

from perfkit.gate.synthetic import synthetic_level, synthetic_record
from perfkit.measure import over_latency_threshold
from perfkit.records import Budget, LevelResult, RunRecord
from perfkit.tuner import judge_trial
from perfkit.tuner._find_load import TrialLoadSettings, find_load

BUDGET = Budget(50.0, 99.0)  # synthetic levels' p99 is 1.3x their latency_ms: 13 ms at 10


def _run(*levels: LevelResult) -> RunRecord:
    return synthetic_record(levels)


def _open_loop(rate: float, sent_rps: float) -> LevelResult:
    lv = synthetic_level(concurrency=rate, latency_ms=10, open_loop=True, noise=0.0)
    return dataclasses.replace(lv, sent_rps=sent_rps, completed_rps=sent_rps, duration_s=6.0)


def test_a_level_with_errors_or_a_shortfall_under_the_percentile_is_not_within_budget_for_every_judge():
    spec = TrialLoadSettings(budget=BUDGET).spec("m")  # the tuner's sweep: measure's threshold at the budget
    errors = synthetic_level(concurrency=4, latency_ms=10, errors=3)
    behind = _open_loop(100.0, 70.0)  # 420 sent of 600 due
    for lv in (errors, behind):
        assert BUDGET.level_us(lv) < BUDGET.latency_budget_us  # its percentile alone is within
        assert not BUDGET.within(lv)
        assert not over_latency_threshold(spec, lv)  # perf_analyzer's -l: the sweep goes on past it
    # the verdict judges by Budget.within: the erroring level is not the pick, whatever its throughput
    ok = synthetic_level(concurrency=2, latency_ms=10)
    v = judge_trial(_run(ok, errors), BUDGET)
    assert BUDGET.within(ok) and v.feasible_load == ok.load
    assert judge_trial(_run(behind), BUDGET).feasible_load is None
    assert judge_trial(_run(_open_loop(100.0, 100.0)), BUDGET).feasible_load is not None


def test_a_level_over_the_percentile_is_over_by_both_rules():
    spec = TrialLoadSettings(budget=BUDGET).spec("m")
    slow = synthetic_level(concurrency=8, latency_ms=60)  # p99 78 ms
    assert over_latency_threshold(spec, slow) and not BUDGET.within(slow)


def test_the_level_by_level_search_stops_at_the_first_level_not_within_budget():
    """Judged by the tuner (a deadline: one run per level), the doubling ends at the level with
    errors, though its percentile is within the budget: the same rule as the verdict's."""
    measured: list[float] = []

    def measure(server, spec, **_kw):
        c = spec.levels[0].value
        measured.append(c)
        return _run(synthetic_level(concurrency=c, latency_ms=10, errors=3 if c == 4 else 0))

    trial_load = TrialLoadSettings(budget=BUDGET, max_concurrency=16)
    rec = find_load(measure, None, trial_load, "m", None, deadline=time.monotonic() + 3600)
    assert measured == [1.0, 2.0, 4.0]
    assert judge_trial(rec, BUDGET).feasible_load == synthetic_level(concurrency=2).load

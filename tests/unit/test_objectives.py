"""The objective registry ranks trials the way each objective means (no server)."""

from __future__ import annotations

import pytest

from perfkit import objectives
from perfkit.errors import InputError
from perfkit.records import Confirmation, LoadLevel, TrialRecord


def _trial(number: int, rps: float, lat_us: float, *, feasible: bool = True, **metrics: float) -> TrialRecord:
    return TrialRecord(
        number=number,
        state="complete",
        params={},
        load=LoadLevel("concurrency", 4),
        throughput_infer_per_s=rps,
        latency_us=lat_us,
        feasible=feasible,
        metrics=dict(metrics),
    )


def test_each_objective_picks_its_own_best():
    wide = _trial(0, 1000.0, 9000.0, hardware_units=4.0, goodput_rps=100.0)
    lean = _trial(1, 600.0, 5000.0, hardware_units=1.0, goodput_rps=500.0)
    trials = [wide, lean]
    assert objectives.get("throughput").best(trials) is wide
    assert objectives.get("per-instance").best(trials) is lean  # 600/1 beats 1000/4
    assert objectives.get("per-gpu").best(trials) is lean
    assert objectives.get("goodput").best(trials) is lean


def test_infeasible_never_wins_and_ties_go_to_lower_latency_then_earlier():
    fast_but_over = _trial(0, 5000.0, 1000.0, feasible=False)
    a = _trial(1, 700.0, 4000.0)
    b = _trial(2, 700.0, 3000.0)
    c = _trial(3, 700.0, 3000.0)
    assert objectives.get("throughput").best([fast_but_over, a, b, c]) is b
    assert objectives.get("throughput").best([fast_but_over]) is None


def test_a_failed_confirmation_demotes_the_pick():
    held = Confirmation(True, LoadLevel("concurrency", 2), 3, 400.0, 380.0, 420.0, 5000.0, 5500.0)
    failed = Confirmation(False, LoadLevel("concurrency", 8), 3, 900.0, 850.0, 950.0, 25000.0, 26000.0)
    top = TrialRecord(0, "complete", {}, LoadLevel("concurrency", 8), 1000.0, 9000.0, True, confirmation=failed)
    second = TrialRecord(1, "complete", {}, LoadLevel("concurrency", 2), 450.0, 4000.0, True, confirmation=held)
    unconfirmed = _trial(2, 800.0, 7000.0)
    assert objectives.get("throughput").best([top, second, unconfirmed]) is second


def test_pareto_front_keeps_only_undominated_trials():
    a, b, dominated, c = (
        _trial(0, 100.0, 1000.0),
        _trial(1, 300.0, 3000.0),
        _trial(2, 200.0, 3500.0),
        _trial(3, 50.0, 900.0),
    )
    assert objectives.pareto_front([a, b, dominated, c]) == [c, a, b]
    assert objectives.get("pareto").study_values(300.0, 3000.0, {}) == [300.0, 3000.0]
    assert objectives.get("throughput").study_values(300.0, 3000.0, {}) == [300.0]


def test_pareto_front_lists_a_repeated_config_once():
    first = _trial(0, 300.0, 3000.0)
    repeat = _trial(4, 300.0, 3000.0, duplicate_of=0.0)  # answered from trial 0, not measured again
    other = _trial(1, 100.0, 1000.0)
    assert objectives.pareto_front([first, other, repeat]) == [other, first]


def test_unknown_objective_is_refused_with_the_choices():
    with pytest.raises(InputError, match="'fastest' is not one of throughput, pareto"):
        objectives.get("fastest")

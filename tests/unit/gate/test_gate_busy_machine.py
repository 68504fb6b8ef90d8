"""The stored-baseline gate on real records of a shared 2-core machine (benchmarks/stopping_and_drift.py,
fixtures/records/real/busy_machine/): a baseline whose windows flipped between a fast and a slow state
(other jobs coming and going) explains an unchanged model's slower current run, so the verdict is
INCONCLUSIVE, not REGRESSION; a model really slowed x1.3 whose current run also got a competing load
stays a REGRESSION, because even its better half of windows is worse than the baseline's worse half."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from perfkit.gate import GateOptions, compare_records, parse_thresholds
from perfkit.gate._machine import machine_move
from perfkit.gate.synthetic import synthetic_level
from perfkit.records import RunRecord

RECORDS = Path(__file__).resolve().parents[3] / "fixtures" / "records" / "real" / "busy_machine"
GATE = GateOptions(thresholds=tuple(parse_thresholds(["throughput:-5%", "p90:+10%"])))  # the benchmark's


def _pair(name: str, current: str = "current") -> tuple[RunRecord, RunRecord]:
    return RunRecord.load(RECORDS / f"{name}_baseline.json"), RunRecord.load(RECORDS / f"{name}_{current}.json")


@pytest.mark.parametrize("name", ["identity_flipping", "identity_flipping2"])
def test_an_unchanged_model_against_a_baseline_whose_windows_flipped_is_inconclusive(name):
    base, cur = _pair(name)
    tput = [w.infer_per_s for w in base.levels[0].windows]
    assert max(tput) > 1.6 * min(tput)  # the baseline's windows: a fast and a slow state, back and forth
    result = compare_records(base, cur, GATE)
    assert result.verdict == "inconclusive", [f.reason for f in result.findings]
    for f in result.findings:
        assert f.verdict == "inconclusive", f.reason
        assert "run's own windows moved back and forth" in f.reason and "gate --ab" in f.reason


def test_a_slowed_model_whose_current_run_also_got_a_competing_load_is_still_a_regression():
    base, cur = _pair("sleeper", "x1.3_loaded_current")
    result = compare_records(base, cur, GATE)
    tput = next(f for f in result.findings if f.metric == "throughput")
    assert tput.verdict == "regression", tput.reason
    assert "the machine moved, but even the current run's better half of windows is worse" in tput.reason
    assert result.verdict == "regression"


def test_a_current_run_busier_throughout_is_not_rescued_by_its_better_half():
    # every window of the current run slower (the machine busier from its start: the time outside the
    # server 0.34 -> 1.43 ms per request), its better half still 41% below the baseline's worse half
    base, cur = _pair("identity_busier_throughout")
    result = compare_records(base, cur, GATE)
    assert result.verdict == "inconclusive", [f.reason for f in result.findings]
    tput = next(f for f in result.findings if f.metric == "throughput")
    assert "better half" not in tput.reason and "gate --ab" in tput.reason


def test_a_client_latency_that_rose_while_the_servers_own_time_did_not_is_the_machine():
    # an unchanged sleep model: p90 +23% at the client, the server's own time per request 4% lower
    base, cur = _pair("sleeper_server_flat")
    b, c = base.levels[0].server, cur.levels[0].server
    assert b is not None and c is not None and c.request_avg_us < b.request_avg_us
    result = compare_records(base, cur, GATE)
    p90 = next(f for f in result.findings if f.metric == "p90")
    assert p90.verdict == "inconclusive", p90.reason
    assert "the server's own time per request did not rise" in p90.reason and "gate --ab" in p90.reason
    assert result.verdict != "regression"


def test_windows_that_flip_are_machine_movement_and_steady_ones_are_not():
    steady = synthetic_level(concurrency=4, windows=8, noise=0.01, seed=3)
    assert machine_move(steady, steady) is None
    # the same level, its odd windows 40% slower: neither a change point nor a trend
    flipped = dataclasses.replace(
        steady,
        windows=tuple(
            dataclasses.replace(w, infer_per_s=w.infer_per_s / 1.4, completed=int(w.completed / 1.4)) if i % 2 else w
            for i, w in enumerate(steady.windows)
        ),
    )
    move = machine_move(steady, flipped)
    assert move is not None and "the current run's own windows moved back and forth" in move.reason
    assert move.size == pytest.approx(0.336, abs=0.02)  # log(1.4): the halves' distance

"""The stored-baseline gate on a machine that moved: inconclusive with its reason, never a regression
that the machine's own movement explains; real slowdowns of 30% still caught."""

from __future__ import annotations

import dataclasses

from perfkit.errors import ExitCode
from perfkit.gate import GateOptions, compare_records
from perfkit.gate._machine import machine_move
from perfkit.gate.synthetic import synthetic_level, synthetic_record
from perfkit.records import Drift, LevelResult, ServerStats

WIN = {"windows": 8, "window_s": 1.5, "noise": 0.02}


def _slowed_from(level: LevelResult, at: int, factor: float) -> LevelResult:
    """The level with its windows from `at` on slowed by `factor` (a machine that got busier),
    its figures the windows' means."""
    wins = []
    for i, w in enumerate(level.windows):
        f = factor if i >= at else 1.0
        wins.append(
            dataclasses.replace(
                w, infer_per_s=w.infer_per_s / f, completed=int(w.completed / f), inferences=int(w.inferences / f),
                p50_us=w.p50_us * f, p99_us=w.p99_us * f, mean_us=w.mean_us * f, p90_us=w.p90_us * f,  # type: ignore[operator]  # synthetic windows keep every percentile
                p95_us=w.p95_us * f, p999_us=w.p999_us * f,  # type: ignore[operator]  # as above
            )
        )  # fmt: skip
    mean_f = sum(factor if i >= at else 1.0 for i in range(len(wins))) / len(wins)
    s = level.service
    service = dataclasses.replace(
        s, mean_us=s.mean_us * mean_f, p50_us=s.p50_us * mean_f, p90_us=s.p90_us * mean_f,
        p95_us=s.p95_us * mean_f, p99_us=s.p99_us * mean_f, p999_us=s.p999_us * mean_f,
    )  # fmt: skip
    tput = sum(w.infer_per_s for w in wins) / len(wins)
    return dataclasses.replace(level, windows=tuple(wins), throughput_infer_per_s=tput, service=service)


def _steady(offset: float = 1.0, seed: int = 0) -> list[LevelResult]:
    return [synthetic_level(concurrency=c, seed=seed + i, offset=offset, **WIN) for i, c in enumerate((1, 4))]


def _verdict_of(result, metric: str, level: str = "concurrency 1"):
    return next(f for f in result.findings if f.metric == metric and f.level == level)


def test_an_unchanged_model_on_a_machine_that_got_busier_is_inconclusive_with_the_reason():
    base = synthetic_record(_steady(seed=1))
    # a competing load started mid-run: the last 4 of 8 windows 30% slower (the run's figures -13%)
    cur = synthetic_record([_slowed_from(lv, 4, 1.3) for lv in _steady(seed=11)])
    result = compare_records(base, cur)
    assert result.verdict == "inconclusive" and result.exit_code == ExitCode.GATE_INCONCLUSIVE
    for level in ("concurrency 1", "concurrency 4"):
        tput = _verdict_of(result, "throughput", level)
        assert tput.verdict == "inconclusive" and tput.past_threshold and tput.more_windows is None
        assert "the current run's own windows drifted: " in tput.reason and "perfkit gate --ab" in tput.reason
        assert "more windows would" not in tput.reason
        assert "from window 5 of 8" in tput.reason or "steadily over 8 windows" in tput.reason
    assert not any(f.verdict == "regression" for f in result.findings)


def test_the_same_change_on_steady_windows_is_still_a_regression():
    # the same size of change with no movement inside either run: the drift is what changed the verdict
    base = synthetic_record(_steady(seed=1))
    cur = synthetic_record(_steady(offset=1.15, seed=11))
    assert compare_records(base, cur).verdict == "regression"


def test_thirty_percent_slower_is_caught_when_the_machine_moved_by_less():
    base = synthetic_record(_steady(seed=1))
    cur = synthetic_record([_slowed_from(lv, 4, 1.12) for lv in _steady(offset=1.3, seed=11)])
    result = compare_records(base, cur)
    assert result.verdict == "regression"
    assert _verdict_of(result, "throughput").verdict == "regression"


def test_ab_is_not_excused_by_drift():
    # both arms of an A/B share one job: the machine's movement hits both alike
    base = synthetic_record(_steady(seed=1))
    cur = synthetic_record([_slowed_from(lv, 4, 1.3) for lv in _steady(seed=11)])
    assert compare_records(base, cur, comparison="ab").verdict == "regression"


def test_a_recorded_drift_counts_when_the_windows_alone_would_not_show_it():
    base = synthetic_record(_steady(seed=1))
    levels = _steady(offset=1.15, seed=11)
    drift = Drift("throughput", 3, 110.0, 90.0, 1e-4)  # the level loop saw it (e.g. windows since pooled)
    cur = synthetic_record([dataclasses.replace(lv, drift=drift) for lv in levels])
    assert compare_records(base, cur).verdict == "inconclusive"
    assert compare_records(base, synthetic_record(levels)).verdict == "regression"


def _with_server(level: LevelResult, request_ms: float) -> LevelResult:
    stats = ServerStats("sleeper", level.request_count, level.request_count, level.request_count, 0.0, 10.0,
                        request_ms * 1e3, 10.0, request_ms * 1e3)  # fmt: skip
    return dataclasses.replace(level, server=stats)


def test_time_outside_the_server_that_grew_is_the_machine_not_the_model():
    b = [_with_server(lv, 9.0) for lv in _steady(seed=1)]  # 10 ms at the client: 1 ms outside the server
    # unchanged model, busier machine: the server's own time the same, 2.5 ms more outside it (+15%)
    busy = [_with_server(lv, 9.0) for lv in _steady(offset=1.15, seed=11)]
    move = machine_move(b[0], busy[0])
    assert move is not None and "time outside the server's own request time" in move.reason
    gate = GateOptions(thresholds=GateOptions().thresholds)
    assert compare_records(synthetic_record(b), synthetic_record(busy), gate).verdict == "inconclusive"
    # slower model: the server's own time grew by all of it, the time outside as it was
    slower = [_with_server(lv, 9.0 + 1.5) for lv in _steady(offset=1.15, seed=11)]
    assert machine_move(b[0], slower[0]) is None
    assert compare_records(synthetic_record(b), synthetic_record(slower), gate).verdict == "regression"

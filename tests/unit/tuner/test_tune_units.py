"""The tuner's pure parts: the concurrency search (gallop and bisect a sqrt(2) ladder from the
similar trial's concurrency, re-measuring the noisy readings it hinges on), the accuracy guard's
comparison and tolerance, the --max-gpu-memory constraint from GPU metrics in a run record, and
progress events."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from perfkit.errors import UsageError
from perfkit.gate.synthetic import synthetic_level, synthetic_record
from perfkit.measure import walk_levels
from perfkit.records import Budget, MetricSample, ProfileSpec, RunRecord
from perfkit.tuner import TuneSettings, judge_trial, parse_max_output_diff
from perfkit.tuner._accuracy import OutputTolerance, compare_outputs
from perfkit.tuner._events import TrialMeasured, TrialRejected
from perfkit.tuner._find_load import TrialLoadSettings, find_load, ladder, start_concurrency
from perfkit.tuner._verdict import constraints

BUDGET_MS = 20.0


class FakeSystem:
    """A model whose p99 grows linearly with concurrency; measures levels the way profile does
    (in order, stopping past the threshold, or bisecting) and counts what it measured."""

    def __init__(self, ms_per_concurrency: float, *, spikes: tuple[int, ...] = ()) -> None:
        self.k = ms_per_concurrency
        self.measured: list[int] = []
        self.spikes = list(spikes)  # the nth measurements (0-based) that a noisy host slows 3x

    def level(self, c: float):
        # synthetic_level's p99 is 1.3x its latency_ms: p99 <= 20 ms while k * c <= 13.4.
        slow = 3.0 if len(self.measured) - 1 in self.spikes else 1.0
        return synthetic_level(concurrency=c, latency_ms=(2.0 + self.k * c) * slow, noise=0.0)

    def __call__(self, server, spec: ProfileSpec, *, command=(), record_path: Path | None = None) -> RunRecord:
        levels = []

        def run(level):
            self.measured.append(int(level.value))
            result = self.level(level.value)
            levels.append(result)
            return result

        walk_levels(spec, run)
        return synthetic_record(levels, model=spec.model)


JUDGE = TrialLoadSettings(budget=Budget(BUDGET_MS, percentile=99), max_concurrency=128)


def _best_concurrency(rec: RunRecord) -> int | None:
    v = judge_trial(rec, latency_budget_ms=BUDGET_MS, percentile=99)
    return int(v.feasible_load.value) if v.feasible_load else None


def test_without_history_the_search_doubles_from_one_until_the_budget_breaks():
    sys_ = FakeSystem(0.5)  # c <= 26.8
    rec = find_load(sys_, None, JUDGE, "m", None)
    assert sys_.measured == [1, 2, 4, 8, 16, 32]
    assert _best_concurrency(rec) == 16


def test_with_history_it_searches_around_the_similar_trial_and_finds_a_finer_answer():
    sys_ = FakeSystem(0.5)  # c <= 26.8: doubling stops at 16, the ladder through 16 finds 23
    rec = find_load(sys_, None, JUDGE, "m", start=16)
    assert ladder(16, 128) == (1, 2, 3, 4, 6, 8, 11, 16, 23, 32, 45, 64, 91, 128)
    assert ladder(1, 4) == (1, 2, 3, 4) and ladder(100, 128) == (1, 2, 3, 4, 6, 9, 12, 18, 25, 35, 50, 71, 100, 128)
    # 16 and 23 within, 32 over and measured again (the answer rests on it): doubling from 1 measures 6
    assert sys_.measured == [16, 23, 32, 32]
    assert _best_concurrency(rec) == 23
    assert [lv.load.value for lv in rec.levels] == sorted(lv.load.value for lv in rec.levels)
    assert len(rec.levels) == 3  # a level measured twice is in the record once (its second reading)


def test_an_answer_below_the_start_is_found_and_a_hopeless_one_is_measured_down_to_concurrency_one():
    sys_ = FakeSystem(3.0)  # c <= 4.5
    rec = find_load(sys_, None, JUDGE, "m", start=32)
    assert _best_concurrency(rec) == 4
    assert len(sys_.measured) < 10
    hopeless = FakeSystem(20.0)  # over the budget at concurrency 1: the judge can prune it
    v = judge_trial(find_load(hopeless, None, JUDGE, "m", start=8), latency_budget_ms=BUDGET_MS, percentile=99)
    assert v.lowest_over_budget and v.feasible_load is None and 1 in hopeless.measured


def test_an_answer_far_above_the_start_is_reached():
    sys_ = FakeSystem(0.05)  # c <= 268: capped by max_concurrency 128
    rec = find_load(sys_, None, JUDGE, "m", start=4)
    assert _best_concurrency(rec) == 128
    assert len(sys_.measured) < 8
    big = FakeSystem(0.13)  # c <= 103: a config needing 8x the similar trial's concurrency
    assert _best_concurrency(find_load(big, None, JUDGE, "m", start=11)) == 88  # ladder 11, 16, 22, ... 88, 124
    assert len(big.measured) <= 8


def test_one_noisy_reading_over_the_budget_does_not_send_the_search_the_wrong_way():
    # The start level (where a similar config met the budget) reads over once: measured again.
    sys_ = FakeSystem(0.5, spikes=(0,))
    assert _best_concurrency(find_load(sys_, None, JUDGE, "m", start=16)) == 23
    assert sys_.measured[:2] == [16, 16]
    # The level the answer rests on reads over once: measured again, the search goes on above.
    sys_ = FakeSystem(0.5, spikes=(1,))  # 16 ok, 23 slowed
    assert _best_concurrency(find_load(sys_, None, JUDGE, "m", start=16)) == 23
    assert sys_.measured == [16, 23, 23, 32, 32]
    # Without noise, a level over the budget stays over: one confirmation, no more.
    sys_ = FakeSystem(3.0)
    find_load(sys_, None, JUDGE, "m", start=4)
    assert sys_.measured.count(6) == 2 and len(sys_.measured) == 3


def test_the_start_is_the_most_similar_trials_concurrency():
    history = [({"max_batch_size": 8, "inst": 1}, 8), ({"max_batch_size": 64, "inst": 1}, 64),
               ({"max_batch_size": 64, "inst": 2}, 48)]  # fmt: skip
    assert start_concurrency([], {"max_batch_size": 8}) is None
    assert start_concurrency(history, {"max_batch_size": 32, "inst": 1}) == 64
    assert start_concurrency(history, {"max_batch_size": 64, "inst": 2}) == 48
    assert start_concurrency(history, {"max_batch_size": 8, "inst": 2}) == 8


def _with_gpu_memory(rec: RunRecord, used_bytes: list[float]) -> RunRecord:
    levels = [
        dataclasses.replace(
            lv, metrics=tuple(MetricSample(t_s=i, gpu="0", memory_used_bytes=b) for i, b in enumerate(used_bytes))
        )  # fmt: skip
        for lv in rec.levels
    ]
    return dataclasses.replace(rec, levels=tuple(levels))


def test_max_gpu_memory_is_a_constraint_read_from_the_runs_gpu_metrics():
    settings = TuneSettings.from_mapping("m", {"latency_budget": "20ms", "max_gpu_memory": "8GiB"})
    assert settings.max_gpu_memory_bytes == 8 * 2**30 and settings.trial_load_settings(None).collect_metrics
    rec = synthetic_record([synthetic_level(concurrency=c, latency_ms=5, noise=0) for c in (1, 2)])
    big = judge_trial(_with_gpu_memory(rec, [6e9, 9.5e9]), latency_budget_ms=20, percentile=99)
    small = judge_trial(_with_gpu_memory(rec, [3e9, 4e9]), latency_budget_ms=20, percentile=99)
    unknown = judge_trial(rec, latency_budget_ms=20, percentile=99)
    assert big.gpu_memory_bytes == 9.5e9 and big.metrics["gpu_memory_bytes"] == 9.5e9
    feasible, cons = constraints(settings, big)
    assert not feasible and cons["gpu_memory"] > 0 and cons["latency"] <= 0
    assert constraints(settings, small)[0] and constraints(settings, small)[1]["gpu_memory"] < 0
    assert constraints(settings, unknown) == (True, {"latency": pytest.approx(-0.675), "gpu_memory": 0.0})
    no_limit = TuneSettings.from_mapping("m", {"latency_budget": "20ms"})
    assert "gpu_memory" not in constraints(no_limit, big)[1] and constraints(no_limit, big)[0]


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("1e-3", OutputTolerance(max_rel=1e-3)),
        ("rel=0.01", OutputTolerance(max_rel=0.01)),
        ("abs=0.5,rel=0.01", OutputTolerance(max_abs=0.5, max_rel=0.01)),
        ("off", OutputTolerance.off()),
    ],
)
def test_max_output_diff_parses(text: str, want: OutputTolerance):
    assert parse_max_output_diff(text) == want


@pytest.mark.parametrize("text", ["", "fast", "rel=-1", "abs=1,abs=2", "max=3"])
def test_bad_max_output_diff_is_a_usage_error_with_an_example(text: str):
    with pytest.raises(UsageError, match="--max-output-diff"):
        parse_max_output_diff(text)


def test_outputs_are_compared_per_output_against_per_datatype_defaults():
    rng = np.random.default_rng(0)
    ref = {"Y": rng.uniform(-2, 2, (8, 16)).astype(np.float32), "IDX": np.arange(8, dtype=np.int64),
           "S": np.array([b"a", b"b"], dtype=np.object_)}  # fmt: skip
    types = {"Y": "FP32", "IDX": "INT64", "S": "BYTES"}
    half = {**ref, "Y": ref["Y"].astype(np.float16).astype(np.float32)}
    step = float(np.abs(ref["Y"]).max()) / 127
    quant = {**ref, "Y": (np.round(ref["Y"] / step) * step).astype(np.float32)}
    default = OutputTolerance()
    assert all(d.within for d in compare_outputs(ref, half, types, default))
    bad = [d for d in compare_outputs(ref, quant, types, default) if not d.within]
    assert [d.name for d in bad] == ["Y"] and "Y (FP32) max abs diff" in bad[0].describe()
    assert all(d.within for d in compare_outputs(ref, quant, types, OutputTolerance(max_rel=0.01)))
    off_by_one = {**ref, "IDX": ref["IDX"] + 1, "S": np.array([b"a", b"c"], dtype=np.object_)}
    assert {d.name for d in compare_outputs(ref, off_by_one, types, default) if not d.within} == {"IDX", "S"}
    reshaped = {**ref, "Y": ref["Y"][:4]}
    assert [d.name for d in compare_outputs(ref, reshaped, types, default) if not d.within] == ["Y"]


def test_events_render_the_progress_lines():
    measured = TrialMeasured(3, 812.4, 16, 99, 18.5, True, 1.2, 4.5, 3)
    assert measured.line() == (
        "  812.4 infer/s at concurrency 16, p99 18.50 ms: within budget (reload 1.2 s, measure 4.5 s, 3 levels)"
    )
    rejected = TrialRejected(4, "mbs=2", "sequence batching preferred batch size must be <= max batch size")
    assert rejected.line().startswith("trial 4: mbs=2: rejected before loading: sequence batching")
    with pytest.raises(dataclasses.FrozenInstanceError):
        measured.number = 5  # type: ignore[misc]  # the events are frozen: that is what this checks


def _recorder_with(service_ms: np.ndarray):
    from perfkit.recorder import LevelRecorder
    from perfkit.records import Samples

    ms = 1_000_000
    n = service_ms.size
    sent = np.arange(n, dtype=np.int64) * (ms // 2)
    rec = LevelRecorder(start_ns=0, window_ns=1000 * ms, closed_loop=True, batch_size=1)
    rec.add(Samples(np.full(n, -1, dtype=np.int64), sent, sent + (service_ms * ms).astype(np.int64),
                    np.zeros(n, np.int32)))  # fmt: skip
    end = int(sent[-1] + 100 * ms)
    return rec, end


@pytest.mark.parametrize(
    ("center_ms", "threshold_ms", "decided"),
    [(30.0, 20.0, "over"), (5.0, 20.0, "under"), (19.0, None, None)],  # None: at the level's own p99
)
def test_a_level_is_decided_once_its_percentile_is_clearly_on_one_side_of_the_budget(center_ms, threshold_ms,
                                                                                      decided):  # fmt: skip
    from perfkit.measure._level import _threshold_decided

    service = np.random.default_rng(1).normal(center_ms, center_ms * 0.05, 2000).clip(0.1)
    rec, end = _recorder_with(service)
    if threshold_ms is None:
        threshold_ms = float(np.percentile(rec.latencies_us(end, "service"), 99)) / 1e3
    spec = ProfileSpec(model="m", levels=(), percentile=99, latency_threshold_ms=threshold_ms, stop_when_decided=True)
    rel = rec.precision(rec.windows(1), end, 99).latency_rel
    assert _threshold_decided(rec, spec, end, rel, True) == decided
    # Not asked (profile's default): never decided early.
    assert _threshold_decided(rec, dataclasses.replace(spec, stop_when_decided=False), end, rel, True) is None


def test_sweep_and_flags_set_the_accuracy_tolerance():
    from perfkit.cli import main as cli_main

    settings = TuneSettings.from_mapping("m", {"latency_budget": "20ms", "max_output_diff": "abs=0.1,rel=0.02"})
    assert settings.max_output_diff == OutputTolerance(max_abs=0.1, max_rel=0.02)
    assert TuneSettings.from_mapping("m", {"latency_budget": "20ms", "max_output_diff": "off"}).max_output_diff == (
        OutputTolerance.off()
    )
    with pytest.raises(UsageError):
        TuneSettings.from_mapping("m", {"latency_budget": "20ms", "max_output_diff": "loose"})
    # The CLI refuses a bad value before any server starts (usage error, exit 2).
    assert cli_main(["tune", "-m", "m", "--model-repository", ".", "--latency-budget", "20ms",
                     "--max-output-diff", "loose"]) == 2  # fmt: skip


def test_after_a_reading_turns_out_within_the_search_goes_on_up_to_the_next_level_read_over():
    sys_ = FakeSystem(0.25, spikes=(4,))  # c <= 53.5; the 5th measurement (45, bisecting 32..64) slowed
    assert _best_concurrency(find_load(sys_, None, JUDGE, "m", start=16)) == 45
    # 64 is already known over: it is confirmed, not galloped past; no level is measured a third time
    assert sys_.measured == [16, 23, 32, 64, 45, 45, 64]


class FakeRateSystem:
    """An open-loop model whose p99 grows with the arrival rate (over 20 ms past 400 req/s); the
    concurrency-1 probe reads 50 req/s, so the search starts at 25 req/s."""

    def __init__(self) -> None:
        self.measured: list[float] = []

    def __call__(self, server, spec: ProfileSpec, *, command=(), record_path: Path | None = None) -> RunRecord:
        lv = spec.levels[0]
        if lv.mode == "concurrency":
            return synthetic_record([synthetic_level(concurrency=1, latency_ms=20.0, noise=0.0)], model=spec.model)
        self.measured.append(lv.value)
        latency_ms = 10.0 if lv.value <= 400 else 30.0  # p99 = 1.3x: 13 ms, or 39 ms
        level = dataclasses.replace(
            synthetic_level(concurrency=lv.value, latency_ms=latency_ms, noise=0.0, open_loop=True), load=lv
        )
        return synthetic_record([level], model=spec.model)


def test_an_open_loop_search_doubles_the_rate_then_bisects():
    sys_ = FakeRateSystem()
    trial_load = TrialLoadSettings(budget=Budget(BUDGET_MS, percentile=99), load_mode="rate", max_rate_rps=10_000.0)
    rec = find_load(sys_, None, trial_load, "m", None)
    v = judge_trial(rec, latency_budget_ms=BUDGET_MS, percentile=99)
    assert v.feasible_load is not None and 380 <= v.feasible_load.value <= 400  # the ladder's resolution
    ups = sys_.measured[: sys_.measured.index(max(sys_.measured))]
    assert all(b / a >= 1.9 for a, b in zip(ups, ups[1:], strict=False))  # doubling while within budget
    assert len(sys_.measured) <= 10  # 25..800 doubling, 800 again, two bisections, the lowest over again


class FakeOverloadSystem:
    """An open-loop model with a capacity of 100 req/s: within 20 ms up to 80 req/s, over it
    from there, and past capacity it completes only 100 req/s (the backlog grows)."""

    def __init__(self) -> None:
        self.measured: list[float] = []

    def __call__(self, server, spec: ProfileSpec, *, command=(), record_path: Path | None = None) -> RunRecord:
        lv = spec.levels[0]
        self.measured.append(lv.value)
        level = synthetic_level(concurrency=lv.value, latency_ms=10.0 if lv.value <= 80 else 30.0, noise=0.0,
                                open_loop=True)  # fmt: skip
        level = dataclasses.replace(level, load=lv, sent_rps=lv.value, completed_rps=min(lv.value, 100.0))
        return synthetic_record([level], model=spec.model)


def test_an_overloaded_level_caps_the_open_loop_search_at_the_capacity_it_completed():
    trial_load = TrialLoadSettings(budget=Budget(BUDGET_MS, percentile=99), load_mode="rate", max_rate_rps=10_000.0)
    sys_ = FakeOverloadSystem()
    rec = find_load(sys_, None, trial_load, "m", 800.0)  # a similar trial sustained 800 req/s
    v = judge_trial(rec, latency_budget_ms=BUDGET_MS, percentile=99)
    assert v.feasible_load is not None and 73 <= v.feasible_load.value <= 80  # 80 req/s, to the ladder's 9%
    # 800 completed 100 req/s: nothing past 105 is measured again, and the walk down 400, 200 is skipped
    assert [x for x in sys_.measured if x > 105] == [800.0, 800.0], sys_.measured
    assert len(sys_.measured) <= 6, sys_.measured
    # Without the overload (every level keeps up), the same start walks down by halving
    plain = FakeOverloadSystem()
    plain_rec = find_load(lambda *a, **k: _kept_up(plain(*a, **k)), None, trial_load, "m", 800.0)
    assert judge_trial(plain_rec, latency_budget_ms=BUDGET_MS, percentile=99).feasible_load == v.feasible_load
    assert 400.0 in plain.measured and len(plain.measured) > len(sys_.measured)


def test_a_search_that_only_has_to_show_its_start_holds_ends_there_and_walks_down_from_a_start_over():
    trial_load = TrialLoadSettings(budget=Budget(BUDGET_MS, percentile=99), load_mode="rate", max_rate_rps=10_000.0)
    sys_ = FakeRateSystem()  # within the budget up to 400 req/s
    rec = find_load(sys_, None, trial_load, "m", 200.0, start_suffices=True)
    v = judge_trial(rec, latency_budget_ms=BUDGET_MS, percentile=99)
    assert sys_.measured == [200.0] and v.feasible_load is not None and v.feasible_load.value == 200.0
    # A start just over the budget is walked down a ladder step at a time to the first level within it
    near = FakeRateSystem()
    rec = find_load(near, None, trial_load, "m", 430.0, start_suffices=True)
    v = judge_trial(rec, latency_budget_ms=BUDGET_MS, percentile=99)
    assert near.measured == [430.0, 394.0] and v.feasible_load is not None and v.feasible_load.value == 394.0
    # A start far over it: two steps down, still over, then searched down and bisected as usual
    over = FakeRateSystem()
    rec = find_load(over, None, trial_load, "m", 600.0, start_suffices=True)
    v = judge_trial(rec, latency_budget_ms=BUDGET_MS, percentile=99)
    assert over.measured[:3] == [600.0, 550.0, 505.0] and v.feasible_load is not None
    assert 365 <= v.feasible_load.value <= 400, over.measured
    # Without it the same start holding is only where the search starts: it gallops past it
    plain = FakeRateSystem()
    find_load(plain, None, trial_load, "m", 200.0)
    assert plain.measured[0] == 200.0 and max(plain.measured) > 400.0


def test_a_walk_down_that_reaches_what_another_config_holds_without_holding_ends_there():
    """A config at the request path's ceiling, measured after another held 560 req/s: its start,
    600, and a step down, 550, read over the budget. Under 560 it could not beat the other
    config, so its search ends there (the trial is pruned), the walk's next step, 505, not
    measured; a start itself at or under that rate ends at the start. Without that rate, or with
    one under the walk's lowest level, it is searched down and bisected as before."""
    trial_load = TrialLoadSettings(budget=Budget(BUDGET_MS, percentile=99), load_mode="rate", max_rate_rps=10_000.0)
    held = FakeRateSystem()  # within the budget up to 400 req/s
    rec = find_load(held, None, trial_load, "m", 600.0, start_suffices=True, held_elsewhere=560.0)
    v = judge_trial(rec, latency_budget_ms=BUDGET_MS, percentile=99)
    assert held.measured == [600.0, 550.0] and v.feasible_load is None and v.lowest_over_budget
    at_start = FakeRateSystem()
    rec = find_load(at_start, None, trial_load, "m", 600.0, start_suffices=True, held_elsewhere=600.0)
    v = judge_trial(rec, latency_budget_ms=BUDGET_MS, percentile=99)
    assert at_start.measured == [600.0] and v.feasible_load is None and v.lowest_over_budget
    for other in (None, 480.0):
        on = FakeRateSystem()
        rec = find_load(on, None, trial_load, "m", 600.0, start_suffices=True, held_elsewhere=other)
        v = judge_trial(rec, latency_budget_ms=BUDGET_MS, percentile=99)
        assert on.measured[:3] == [600.0, 550.0, 505.0] and v.feasible_load is not None, (other, on.measured)
        assert 365 <= v.feasible_load.value <= 400
    # A walk that holds a step down ends there, as it did
    near = FakeRateSystem()
    rec = find_load(near, None, trial_load, "m", 430.0, start_suffices=True, held_elsewhere=380.0)
    assert near.measured == [430.0, 394.0]
    # Over at a start under what another config holds: the start alone is measured
    under = FakeRateSystem()
    rec = find_load(under, None, trial_load, "m", 430.0, start_suffices=True, held_elsewhere=560.0)
    assert under.measured == [430.0] and judge_trial(rec, latency_budget_ms=BUDGET_MS, percentile=99).lowest_over_budget


def test_the_rate_another_config_holds_is_the_best_feasible_trials_load_and_none_per_hardware_unit():
    import optuna

    from perfkit.tuner._search._request_path import held_rps

    study = optuna.create_study(direction="maximize")
    assert held_rps(study, "throughput") is None
    for rate, feasible in ((1270.0, True), (6610.0, True), (7000.0, False)):
        load = {"mode": "request_rate", "value": rate, "distribution": "poisson"}
        attrs = {"params": {}, "feasible": feasible, "throughput_infer_per_s": rate, "load": load, "metrics": {}}
        study.add_trial(optuna.trial.create_trial(value=rate, user_attrs=attrs))
    assert held_rps(study, "throughput") == 6610.0  # the infeasible 7000 holds nothing
    assert held_rps(study, "per-instance") is None


def _kept_up(rec: RunRecord) -> RunRecord:
    lv = rec.levels[0]
    return dataclasses.replace(rec, levels=(dataclasses.replace(lv, completed_rps=lv.sent_rps),))


def test_the_default_load_is_open_loop_and_closed_loop_for_a_decoupled_model(capsys):
    """TuneSettings.load_for is the one rule: --load given wins; else rate, concurrency for a decoupled model."""
    from perfkit.cli import main as cli_main

    default = TuneSettings(model="m", budget=Budget(20))
    assert default.load is None  # nothing asked: the rule decides
    assert default.load_for(decoupled=False) == "rate" and default.load_for(decoupled=True) == "concurrency"
    trial_load = default.trial_load_settings(None)
    assert trial_load.load_mode == "rate" and trial_load.open_loop and trial_load.distribution == "poisson"
    assert trial_load.level(100).mode == "request_rate"
    assert trial_load.load_line(default=True).startswith("open loop, poisson arrivals") and "(the default)" in (
        trial_load.load_line(default=True)
    )
    stream = default.trial_load_settings(None, streaming=True)
    assert stream.load_mode == "concurrency" and not stream.open_loop
    assert "closed loop for a decoupled model" in stream.load_line(default=True)
    # what is asked is what runs, decoupled or not
    closed, open_ = (TuneSettings(model="m", budget=Budget(20), load="concurrency"),
                     TuneSettings(model="m", budget=Budget(20), load="rate"))  # fmt: skip
    assert closed.load_for(decoupled=False) == closed.load_for(decoupled=True) == "concurrency"
    assert open_.load_for(decoupled=False) == open_.load_for(decoupled=True) == "rate"
    assert "(the default" not in TuneSettings(model="m", budget=Budget(20), load="rate").trial_load_settings(
        None
    ).load_line(default=False)
    # a sweep file's [tune] takes the same default, and its load key as given
    assert TuneSettings.from_mapping("m", {"latency_budget": "20ms"}).load is None
    assert TuneSettings.from_mapping("m", {"latency_budget": "20ms", "load": "concurrency"}).load == "concurrency"
    with pytest.raises(UsageError, match="--load 'closed'"):
        TuneSettings.from_mapping("m", {"latency_budget": "20ms", "load": "closed"})
    assert cli_main(["tune", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "Default: rate (open loop" in help_text and "concurrency for a decoupled model" in help_text


def test_a_deadline_fits_each_level_to_the_time_left_and_ends_the_search_with_what_it_measured(monkeypatch):
    """--max-time reaches into the load search: each level gets the windows that fit before the
    deadline, a level whose fewest windows do not fit is not started, and OutOfTime carries every
    level measured. A fake clock advances by what each level would take (warm-up + its windows)."""
    from perfkit.tuner import _find_load
    from perfkit.tuner._ladder import OutOfTime

    clock = [100.0]
    monkeypatch.setattr(_find_load.time, "monotonic", lambda: clock[0])
    system = FakeSystem(1.0)
    windows: list[int] = []

    def timed(server, spec: ProfileSpec, **kw) -> RunRecord:
        windows.append(spec.max_trials)
        clock[0] += spec.warmup_s + spec.max_trials * spec.measurement_interval_ms / 1e3
        return system(server, spec, **kw)

    trial_load = dataclasses.replace(JUDGE, measurement_interval_ms=800.0, warmup_s=0.5, min_windows=3, max_windows=6)
    with pytest.raises(OutOfTime) as ended:
        find_load(timed, None, trial_load, "m", start=8, deadline=110.0)
    # 10 s: a whole level (0.5 + 6 x 0.8 = 5.3 s), then 4 windows fit (4.7 s left, 1 s for starting
    # and ending a level), then 1 s left holds no 3 windows
    assert windows == [6, 4] and clock[0] <= 110.0
    assert ended.value.record is not None and len(ended.value.record.levels) == 2
    # Without history the doubling runs a level at a time under a deadline, each fitted the same way
    clock[0], windows[:] = 100.0, []
    with pytest.raises(OutOfTime) as ended:
        find_load(timed, None, trial_load, "m", start=None, deadline=112.0)
    assert windows == [6, 6] and [lv.load.value for lv in ended.value.record.levels] == [1.0, 2.0]
    # Nothing fits: nothing is measured
    clock[0], windows[:] = 100.0, []
    with pytest.raises(OutOfTime) as ended:
        find_load(timed, None, trial_load, "m", start=8, deadline=103.0)
    assert windows == [] and ended.value.record is None
    # The first level after a reload warms up 2 s and is fitted with it: 5 windows, not 6, fit
    # in the 7 s left (2 + 5 x 0.8 + 1 s); it ends within the deadline
    clock[0], windows[:] = 100.0, []
    warmups: list[float] = []

    def timed_warmup(server, spec: ProfileSpec, **kw) -> RunRecord:
        warmups.append(spec.warmup_s)
        return timed(server, spec, **kw)

    with pytest.raises(OutOfTime) as ended:
        find_load(timed_warmup, None, trial_load, "m", start=8, deadline=107.0, first_warmup_s=2.0)
    assert windows == [5] and warmups == [2.0] and clock[0] <= 107.0, (windows, warmups, clock)


def test_a_start_that_could_not_keep_up_is_not_walked_down_a_step_at_a_time():
    # 800 req/s offered, 100 completed: the capacity tells every step down to 105 is over, so the
    # walk a step at a time is skipped and the search goes down by the capacity, as without it
    trial_load = TrialLoadSettings(budget=Budget(BUDGET_MS, percentile=99), load_mode="rate", max_rate_rps=10_000.0)
    sys_ = FakeOverloadSystem()
    rec = find_load(sys_, None, trial_load, "m", 800.0, start_suffices=True)
    v = judge_trial(rec, latency_budget_ms=BUDGET_MS, percentile=99)
    assert v.feasible_load is not None and 73 <= v.feasible_load.value <= 80
    assert [x for x in sys_.measured if x > 105] == [800.0], sys_.measured


@pytest.mark.parametrize("start", [340.0, 460.0])
def test_a_search_from_a_prediction_moves_by_the_predictions_tolerance_and_needs_fewer_levels(start: float):
    # Within the budget up to 400 req/s, predicted 15% either side of it: from the prediction the
    # search moves 3 rate steps (x1.30) and finds the same answer in fewer levels than doubling.
    trial_load = TrialLoadSettings(budget=Budget(BUDGET_MS, percentile=99), load_mode="rate", max_rate_rps=10_000.0)
    answers, counts = [], []
    for predicted in (True, False):
        sys_ = FakeRateSystem()
        rec = find_load(sys_, None, trial_load, "m", start, predicted=predicted)
        v = judge_trial(rec, latency_budget_ms=BUDGET_MS, percentile=99)
        assert v.feasible_load is not None
        answers.append(v.feasible_load.value)
        counts.append(len(sys_.measured))
        if predicted:
            assert max(sys_.measured) <= start * 2 ** (3 / 8) * 1.01, sys_.measured  # no doubling past it
    assert answers[0] == pytest.approx(answers[1], rel=0.1) and 365 <= answers[0] <= 400
    assert counts[0] < counts[1], counts


def test_a_trial_stopped_under_what_another_config_holds_is_pruned_saying_so():
    """The runner's verdict of such a search: pruned (not a candidate for confirmation), its reason
    naming the rate the other config holds."""
    from types import SimpleNamespace

    import optuna

    from perfkit.tuner._trial import TrialRunner
    from perfkit.tuner._verdict import TrialVerdict

    events: list = []
    runner = SimpleNamespace(s=TuneSettings(model="m", budget=Budget(20)), trial_load=SimpleNamespace(open_loop=True),
                             emit=events.append)  # fmt: skip
    study = optuna.create_study(direction="maximize")
    for held in (6610.0, None):
        trial = study.ask()
        verdict = TrialVerdict(None, None, None, True, 6100.0, 24_000.0, 3, None, held_elsewhere_rps=held)
        TrialRunner._tell(runner, study, trial, verdict, 0.1, 2.0, 2.5)  # type: ignore[arg-type]  # a stand-in with the fields _tell reads
        assert study.trials[-1].state == optuna.trial.TrialState.PRUNED
    lines = [e.line() for e in events]
    assert lines[0] == (
        "  pruned: p99 24.00 ms at the lowest rate tried is over the budget, where another config holds 6610"
        " req/s: lower could not beat it (2.5 s)"
    ), lines
    assert lines[1] == "  pruned: p99 24.00 ms at the lowest rate tried is over the budget (2.5 s)"

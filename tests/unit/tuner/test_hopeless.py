"""No trial longer than its answer needs: a level that shows no load can meet the budget (its service
time alone over it, or the least load far over it) ends the load search there, and the trial is
pruned saying why."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import optuna

from perfkit.gate.synthetic import synthetic_level, synthetic_record
from perfkit.records import Budget, LevelResult, LoadLevel, ProfileSpec, RunRecord
from perfkit.records._level import ServerStats
from perfkit.tuner import TuneSettings, judge_trial
from perfkit.tuner._find_load import TrialLoadSettings, find_load
from perfkit.tuner._hopeless import FLOOR_MARGIN, floor_over, hopeless, service_over
from perfkit.tuner._trial import TrialRunner
from perfkit.tuner._trial_cut import answered

BUDGET = Budget(20.0, percentile=99)


def _stats(compute_ms: float, *, per_execution: int = 1) -> ServerStats:
    return ServerStats("m", 100, 100 // per_execution, 100, 0.0, 100.0, compute_ms * 1e3, 100.0, compute_ms * 1e3)


def _level(c: float, p99_ms: float, *, server: ServerStats | None = None, rel: float = 0.05) -> LevelResult:
    lv = synthetic_level(concurrency=c, latency_ms=p99_ms / 1.3, noise=0.0)  # synthetic p99 = 1.3x latency_ms
    return dataclasses.replace(lv, server=server, precision=dataclasses.replace(lv.precision, latency_rel=rel))


def test_a_service_time_over_the_budget_unbatched_shows_no_load_holds():
    why = service_over(_level(8, 90.0, server=_stats(30.0)), BUDGET)
    assert why is not None and "service time alone, 30.20 ms a request unbatched" in why, why
    assert service_over(_level(8, 90.0, server=_stats(15.0)), BUDGET) is None  # within: a lower load might hold
    # batched: at a lower load its batches are smaller and quicker
    assert service_over(_level(8, 90.0, server=_stats(30.0, per_execution=4)), BUDGET) is None
    assert service_over(_level(8, 90.0), BUDGET) is None  # no server statistics: cannot tell
    assert service_over(_level(8, 90.0, server=_stats(30.0)), Budget(20.0, 99, "ttft")) is None  # a stream's budget
    # a client batch of 4 per request is one request per execution
    assert service_over(_level(8, 90.0, server=_stats(30.0, per_execution=1)), BUDGET, batch_size=4) is not None


def test_the_least_load_far_over_the_budget_past_its_noise_shows_no_load_holds():
    far = _level(1, 20.0 * (FLOOR_MARGIN + 0.1))
    why = floor_over(far, BUDGET)
    assert why is not None and "1.6x the budget" in why and "at the least load" in why, why
    assert floor_over(_level(1, 20.0 * 1.3), BUDGET) is None  # a shared host's swing: measured as before
    assert floor_over(_level(1, 20.0 * 1.6, rel=0.8), BUDGET) is None  # within its own interval of the margin
    # both rules read only the least load: above it, contention or a BLS model's composed queues inflate it
    assert hopeless(_level(8, 200.0, server=_stats(30.0)), BUDGET, at_floor=False) is None
    assert hopeless(far, BUDGET, at_floor=True) is not None
    assert hopeless(_level(1, 25.0, server=_stats(30.0)), BUDGET, at_floor=True) is not None  # service alone


class Hopeless:
    """A model whose every request alone takes 30 ms (unbatched) against a 20 ms budget."""

    def __init__(self) -> None:
        self.measured: list[LoadLevel] = []

    def __call__(self, server, spec: ProfileSpec, *, command=(), record_path: Path | None = None) -> RunRecord:
        load = spec.levels[0]
        self.measured.append(load)
        lv = dataclasses.replace(_level(load.value, 45.0, server=_stats(30.0)), load=load)
        if load.mode == "request_rate":
            lv = dataclasses.replace(lv, sent_rps=load.value, completed_rps=load.value)
        return synthetic_record([lv], model=spec.model)


def test_a_search_whose_least_load_shows_no_load_holds_ends_there():
    opened = TrialLoadSettings(budget=BUDGET, load_mode="rate", max_rate_rps=10_000.0)
    model = Hopeless()
    rec = find_load(model, None, opened, "m", None)  # the probe (one request at a time) already answers
    assert [lv.mode for lv in model.measured] == ["concurrency"] and len(rec.levels) == 1
    # from a start, the search goes down as before; at concurrency 1 it is not measured again
    closed = TrialLoadSettings(budget=BUDGET, max_concurrency=64)
    model = Hopeless()
    find_load(model, None, closed, "m", start=8)
    values = [lv.value for lv in model.measured]
    assert values[:2] == [8.0, 8.0] and values[-1] == 1.0 and values.count(1.0) == 1, values


def test_such_a_trial_is_pruned_saying_why_no_load_holds():
    model = Hopeless()
    rec = find_load(model, None, TrialLoadSettings(budget=BUDGET), "m", start=None)
    verdict = answered(judge_trial(rec, BUDGET), rec, TrialLoadSettings(budget=BUDGET))
    assert verdict.lowest_over_budget and "no load holds it" in verdict.search_cut
    events: list = []
    runner = SimpleNamespace(s=TuneSettings(model="m", budget=BUDGET), trial_load=SimpleNamespace(open_loop=False),
                             emit=events.append)  # fmt: skip
    study = optuna.create_study(direction="maximize")
    TrialRunner._tell(runner, study, study.ask(), verdict, 0.1, 2.0, 2.5)  # type: ignore[arg-type]  # a stand-in with the fields _tell reads
    assert study.trials[-1].state == optuna.trial.TrialState.PRUNED
    reason = study.trials[-1].user_attrs["fail_reason"]
    told = "at the lowest load tried is over the budget (its service time alone, 30.20 ms a request unbatched"
    assert told in reason, reason
    # a search whose lowest level shows nothing of the kind keeps its reason as it was
    plain = synthetic_record([_level(1, 25.0)])
    assert answered(judge_trial(plain, BUDGET), plain, TrialLoadSettings(budget=BUDGET)).search_cut == ""


class RateModel:
    """An open-loop model within the budget up to 400 req/s (p99 13 ms), over past it (39 ms)."""

    def __init__(self) -> None:
        self.measured: list[float] = []

    def __call__(self, server, spec: ProfileSpec, *, command=(), record_path: Path | None = None) -> RunRecord:
        load = spec.levels[0]
        self.measured.append(load.value)
        lv = dataclasses.replace(_level(load.value, 13.0 if load.value <= 400 else 39.0), load=load)
        return synthetic_record([dataclasses.replace(lv, sent_rps=load.value, completed_rps=load.value)])


def test_a_predicted_config_over_the_budget_where_another_holds_more_ends_there():
    """By its prediction it could not beat the best measured: over at or under the rate another config
    holds, the search ends (not measured again, not walked down); over above it, it goes down only
    to that rate."""
    from perfkit.tuner._load_start import load_start

    opened = TrialLoadSettings(budget=BUDGET, load_mode="rate", max_rate_rps=10_000.0)
    how = load_start(opened, history_start=None, queued_rps=500.0, predicted_rps=None, is_original=False,
                     original_at_prediction_only=False, at_path_ceiling=False, held_elsewhere_rps=600.0)  # fmt: skip
    assert how.held_elsewhere == 600.0 and not how.start_suffices  # every predicted config but yours
    mine = load_start(opened, history_start=None, queued_rps=None, predicted_rps=500.0, is_original=True,
                      original_at_prediction_only=False, at_path_ceiling=False, held_elsewhere_rps=600.0)  # fmt: skip
    assert mine.held_elsewhere is None  # your config's own figure is always measured
    model = RateModel()
    rec = find_load(model, None, opened, "m", 500.0, predicted=True, held_elsewhere=600.0)
    assert model.measured == [500.0] and judge_trial(rec, BUDGET).lowest_over_budget
    model = RateModel()
    rec = find_load(model, None, opened, "m", 900.0, predicted=True, held_elsewhere=600.0)
    under = [r for r in model.measured if r <= 600.0]  # the gallop down ends at its first step at or under 600
    assert len(under) == 1 and model.measured[-1] == under[0], model.measured
    assert judge_trial(rec, BUDGET).feasible_load is None
    model = RateModel()  # without another config's rate the search finds its answer as before
    rec = find_load(model, None, opened, "m", 500.0, predicted=True)
    v = judge_trial(rec, BUDGET)
    assert v.feasible_load is not None and 360 <= v.feasible_load.value <= 400

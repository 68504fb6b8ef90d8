"""The claim a tune run makes, from synthetic records: confirmation (repeats summarised, a pick
whose confirmation failed is demoted and never recommended, the headline is the confirmed
figure), the open-loop sustainability rules, the arrival-rate ladder, and the queueing models
the known-truth fixture is checked against."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from perfkit.errors import UsageError
from perfkit.gate.synthetic import synthetic_level
from perfkit.records import Budget, Confirmation, LoadLevel, Machine, TrialRecord, TuneRecord, open_loop_shortfall
from perfkit.tuner._claim_stats import describe, summarize_repeats
from perfkit.tuner._confirm import ConfirmSettings, repeat_windows
from perfkit.tuner._find_load import TrialLoadSettings, rate_ladder, start_on, step_below
from perfkit.tuner._outputs import trials_frame
from perfkit.tuner._record import summary
from perfkit.tuner._search import MeasuredSearch
from tests.support.queueing import md1_wait_cdf, mm1_response_quantile_s, sustainable_rate_rps

C8 = LoadLevel("concurrency", 8.0)


def _repeats(p99s_ms: list[float], tput: float = 100.0) -> list:
    # synthetic_level's p99 is 1.3x its latency_ms
    return [
        dataclasses.replace(
            synthetic_level(concurrency=8, latency_ms=p / 1.3, noise=0.0), throughput_infer_per_s=tput + i
        )
        for i, p in enumerate(p99s_ms)
    ]


def test_a_claim_holds_only_when_every_repeat_is_within_budget():
    held = summarize_repeats(C8, _repeats([44, 45, 46]), repeats=3, budget_ms=50, percentile=99, metric="latency")
    assert held.held and held.repeats == 3
    assert held.throughput_infer_per_s == pytest.approx(101.0)
    assert held.throughput_low < 101.0 < held.throughput_high
    assert held.latency_us == pytest.approx(46_000, rel=0.02)  # the worst repeat
    assert held.latency_us <= held.latency_ucb_us <= 50_000
    over = summarize_repeats(C8, _repeats([40, 55, 48]), repeats=3, budget_ms=50, percentile=99, metric="latency")
    assert not over.held and "1 of 3" in over.note
    short = summarize_repeats(C8, _repeats([40]), repeats=3, budget_ms=50, percentile=99, metric="latency")
    assert not short.held and "2 of 3 runs failed" in short.note


def test_a_claim_needs_its_upper_bound_within_budget_not_only_its_readings():
    """Every repeat reads under the budget, but one reading's own interval is so wide that, pooled with the
    others', a re-measurement as long as the confirmation could read over it: not held."""
    levels = _repeats([44, 45, 46])
    noisy = dataclasses.replace(levels[2], precision=dataclasses.replace(levels[2].precision, latency_rel=0.30))
    edge = summarize_repeats(C8, [*levels[:2], noisy], repeats=3, budget_ms=50, percentile=99, metric="latency")
    assert edge.latency_us < 50_000 < edge.latency_ucb_us
    assert not edge.held and "upper bound" in edge.note
    calm = dataclasses.replace(levels[2], precision=dataclasses.replace(levels[2].precision, latency_rel=0.02))
    ok = summarize_repeats(C8, [*levels[:2], calm], repeats=3, budget_ms=50, percentile=99, metric="latency")
    assert ok.held and ok.latency_ucb_us <= 50_000


def test_a_confirmation_run_lasts_at_least_the_confirm_time_however_short_its_windows():
    cs = ConfirmSettings(min_windows=5, max_windows=10, min_repeat_s=5.0)
    assert repeat_windows(300.0, cs) == (17, 22)  # 17 x 300 ms >= 5 s, with the same room to settle
    assert repeat_windows(1000.0, cs) == (5, 10)  # 5 windows already last 5 s
    assert repeat_windows(2000.0, cs) == (5, 10)  # never fewer windows than min_windows
    assert repeat_windows(300.0, ConfirmSettings(min_repeat_s=0.0)) == (5, 10)
    from perfkit.tuner import TuneSettings

    assert TuneSettings(model="m", budget=Budget(20), trials=1).confirm_time_s == 5.0
    table = TuneSettings.from_mapping("m", {"latency_budget": "20ms", "trials": 1, "confirm_time": "8s"})
    assert table.confirm_time_s == 8.0
    with pytest.raises(UsageError, match="--confirm-time"):
        TuneSettings(model="m", budget=Budget(20), trials=1, confirm_time_s=-1.0)


def test_the_claimed_interval_is_where_one_re_measurement_reads_and_open_loop_scales_to_the_rate_asked():
    # Closed loop: a prediction interval (sqrt(1 + 1/n)), twice the width of the mean's for n = 3.
    closed = summarize_repeats(C8, _repeats([44, 45, 46], tput=100.0), repeats=3, budget_ms=50, percentile=99,
                               metric="latency")  # fmt: skip
    assert closed.throughput_infer_per_s == pytest.approx(101.0)
    t2 = 4.303  # t(0.975, 2)
    assert closed.throughput_high - 101.0 == pytest.approx(t2 * 1.0 * math.sqrt(4 / 3), rel=0.01)
    # Open loop at 657 req/s: three Poisson schedules that sent 2% more than asked, all kept up.
    rate = LoadLevel("request_rate", 657.0, "poisson")
    levels = [
        dataclasses.replace(
            synthetic_level(concurrency=657, latency_ms=100, noise=0.0, open_loop=True),
            load=rate,
            sent_rps=sent,
            completed_rps=sent,
            throughput_infer_per_s=sent,
            duration_s=5.1,
        )  # fmt: skip
        for sent in (669.4, 670.2, 670.4)
    ]
    c = summarize_repeats(rate, levels, repeats=3, budget_ms=150, percentile=99, metric="latency")
    assert c.held and c.throughput_infer_per_s == pytest.approx(657.0)  # the rate asked, not the draw's luck
    # A 6 s re-measurement at 657 req/s reads 657 +- ~2% from its own Poisson count: inside.
    assert c.throughput_low <= 657.0 * 0.97 and c.throughput_high >= 657.0 * 1.03
    assert c.throughput_high - c.throughput_low < 0.15 * 657.0
    # A run that could not keep up is not scaled up past what it completed relative to what it sent.
    behind = [dataclasses.replace(lv, completed_rps=600.0, throughput_infer_per_s=600.0 * 1.02) for lv in levels]
    assert summarize_repeats(rate, behind, repeats=3, budget_ms=150, percentile=99,
                             metric="latency").throughput_infer_per_s < 657.0  # fmt: skip


def test_repeats_that_disagree_make_no_claim_even_when_each_is_within_budget():
    """40, 45 and 49 ms: each within 50 ms, but a fourth run could read ~60 ms (the prediction bound)."""
    spread = summarize_repeats(C8, _repeats([40, 45, 49]), repeats=3, budget_ms=50, percentile=99, metric="latency")
    assert spread.latency_us < 50_000 and spread.latency_ucb_us > 55_000
    assert not spread.held and "upper bound" in spread.note


def _trial(n: int, tput: float, conf: Confirmation | None, *, original: bool = False) -> TrialRecord:
    return TrialRecord(n, "complete", {"instance_count": n + 1}, C8, tput, 40_000.0, True, is_original=original,
                       confirmation=conf)  # fmt: skip


def _conf(held: bool, tput: float, note: str = "") -> Confirmation:
    return Confirmation(held, LoadLevel("concurrency", 6.0), 3, tput, tput * 0.97, tput * 1.03, 45_000.0,
                        47_000.0, searched_load=C8, note=note)  # fmt: skip


def _tune(trials: tuple[TrialRecord, ...]) -> TuneRecord:
    return TuneRecord("0", "now", (), Machine.from_mapping({}), {}, "m", Budget(50.0, 99.0), "throughput", "", None,
                      None, trials)  # fmt: skip


def test_a_demoted_pick_is_never_recommended_and_the_claim_is_the_confirmed_figure(tmp_path: Path):
    rec = _tune((
        _trial(0, 500.0, None, original=True),
        _trial(1, 1466.7, _conf(False, 0.0, "over the budget in 3 of 3 runs")),  # the search's edge reading
        _trial(2, 1300.0, _conf(True, 1060.0)),
        _trial(3, 1200.0, None),  # never confirmed: ranked by the search alone, below confirmed ones
    ))  # fmt: skip
    best = rec.best()
    assert best is not None and best.number == 2 and best.claimed_throughput == 1060.0
    rec = dataclasses.replace(rec, best_trial=2)
    lines = summary(rec, tmp_path).lines
    text = "\n".join(lines)
    assert (
        "best: trial 2" in text
        and "confirmed 1060.0 infer/s (a re-measurement within 1028.2-1091.8 at 95%, 3 runs)" in text
    )
    assert "stepped down from concurrency 8" in text and "the search read 1300.0 infer/s" in text
    assert "demoted (confirmation failed): trial(s) 1" in text
    frame = trials_frame(rec.trials, 99.0)
    row1 = frame[frame.trial == 1].iloc[0]
    assert row1.confirmed == "DEMOTED" and "3 of 3" in row1.confirmation_note
    assert frame[frame.trial == 2].iloc[0].confirmed_infer_per_s == 1060.0
    assert describe(_conf(False, 0.0, "x"), 99.0, "latency").startswith("DEMOTED")


def test_open_loop_levels_are_sustainable_only_on_schedule_without_backlog_or_drops():
    ok = synthetic_level(concurrency=100, latency_ms=10, open_loop=True, noise=0.0)
    assert ok.load.mode == "request_rate"
    ok = dataclasses.replace(ok, sent_rps=100.0, completed_rps=100.0, duration_s=6.0)
    assert open_loop_shortfall(ok) is None and Budget(50, 99).within(ok)
    assert "dropped" in (open_loop_shortfall(dataclasses.replace(ok, dropped_count=3)) or "")
    behind = dataclasses.replace(ok, sent_rps=70.0)  # 420 sent of 600 due: far past Poisson noise
    assert "sent 70.0" in (open_loop_shortfall(behind) or "") and not Budget(50, 99).within(behind)
    assert open_loop_shortfall(dataclasses.replace(ok, sent_rps=93.0)) is None  # within Poisson noise
    backlog = dataclasses.replace(ok, completed_rps=80.0)
    assert "backlog" in (open_loop_shortfall(backlog) or "")
    closed = synthetic_level(concurrency=4, latency_ms=10)
    assert open_loop_shortfall(closed) is None


def test_rate_ladder_and_levels():
    values = rate_ladder(100.0, 20000.0)
    assert 100.0 in values and values == tuple(sorted(values)) and values[0] >= 1.0 and values[-1] <= 20000.0
    ratios = [b / a for a, b in zip(values, values[1:], strict=False)]
    assert all(1.05 < r < 1.13 for r in ratios[9:-1])  # 2**(1/8) apart (rounded to 3 digits)
    assert step_below(values, 100.0) == pytest.approx(91.7) and step_below(values, values[0]) is None
    assert start_on(values, 101.0) == 100.0
    js = TrialLoadSettings(budget=Budget(50), load_mode="rate", distribution="constant")
    assert js.level(120.0) == LoadLevel("request_rate", 120.0, "constant")
    assert TrialLoadSettings(budget=Budget(50)).level(6.0) == LoadLevel("concurrency", 6.0)


def test_queueing_models_agree_with_their_closed_forms():
    # M/M/1: the response time is exponential with rate mu - lambda.
    assert mm1_response_quantile_s(50.0, 0.01, 99.0) == pytest.approx(math.log(100) / 50.0)
    lam = sustainable_rate_rps("M/M/1", 10.0, 100.0)
    assert mm1_response_quantile_s(lam, 0.01, 99.0) == pytest.approx(0.1)
    # M/D/1: P(W <= 0) = 1 - rho; deterministic service waits less than exponential service.
    assert md1_wait_cdf(0.0, 50.0, 0.01) == pytest.approx(0.5)
    assert md1_wait_cdf(0.25, 50.0, 0.01) == pytest.approx(1.0, abs=1e-6)
    with pytest.raises(UsageError):
        md1_wait_cdf(1.0, 50.0, 0.01)
    md1 = sustainable_rate_rps("M/D/1", 10.0, 100.0)
    assert lam < md1 < 100.0 and md1 == pytest.approx(77.35, abs=0.05)
    assert sustainable_rate_rps("M/D/1", 10.0, 5.0) == 0.0


def test_per_hardware_objectives_divide_by_what_the_config_occupies():
    from perfkit.server.modelconfig import parse_config
    from perfkit.tuner._objective import hardware_units

    cpu = parse_config('name: "m" instance_group [ { count: 3 kind: KIND_CPU } ]')
    gpu = parse_config('name: "m" instance_group [ { count: 2 kind: KIND_GPU gpus: [ 0, 1 ] } ]')
    spread = parse_config('name: "m" instance_group [ { count: 1 kind: KIND_GPU } ]')
    assert hardware_units(cpu, "per-instance", 0) == 3 and hardware_units(cpu, "per-gpu", 4) == 1
    assert hardware_units(gpu, "per-instance", 4) == 4 and hardware_units(gpu, "per-gpu", 4) == 2
    assert hardware_units(spread, "per-gpu", 4) == 4 and hardware_units(spread, "throughput", 4) == 1
    # A config needing twice the hardware for 10% more loses under per-gpu.
    small = TrialRecord(1, "complete", {}, C8, 1000.0, 1.0, True, metrics={"hardware_units": 1.0})
    big = TrialRecord(2, "complete", {}, C8, 1100.0, 1.0, True, metrics={"hardware_units": 2.0})
    rec = _tune((small, big))
    assert rec.best() is big
    assert dataclasses.replace(rec, objective="per-gpu").best() is small


def test_the_report_shows_the_confirmed_claim_and_the_demoted_trial():
    from perfkit.report import _tune as T

    rec = _tune((
        _trial(0, 500.0, None, original=True),
        _trial(1, 1466.7, _conf(False, 0.0, "over the budget in 3 of 3 runs")),
        _trial(2, 1300.0, _conf(True, 1060.0)),
    ))  # fmt: skip
    sentence = T.recommendation(rec)
    assert "gives 1,060 infer/s" in sentence and "confirmed in 3 runs" in sentence
    table = T.trials_table(rec)
    cells = {row[0]: row[-1] for row in table.rows}
    assert cells[1].startswith("DEMOTED") and "stepped down from concurrency 8" in cells[2]


def _runner_over_above_660(tmp_path: Path, measured: list[float]):
    """A stand-in runner whose model is over a 150 ms p99 budget above 660 req/s (open loop); each
    rate it measures goes to `measured`."""
    from types import SimpleNamespace

    from perfkit.gate.synthetic import synthetic_record

    def measure(server, spec, *, command=(), record_path=None):
        lv = spec.levels[0]
        measured.append(lv.value)
        level = dataclasses.replace(
            synthetic_level(concurrency=lv.value, latency_ms=100.0 if lv.value <= 660 else 200.0, noise=0.0,
                            open_loop=True),
            load=lv, sent_rps=lv.value, completed_rps=lv.value, duration_s=5.0,
        )  # fmt: skip
        return synthetic_record([level], model=spec.model)

    trial_load = TrialLoadSettings(budget=Budget(150), load_mode="rate", max_rate_rps=10_000.0)
    settings = SimpleNamespace(command=(), budget=Budget(150.0, 99.0, "latency"))
    return SimpleNamespace(measure=measure, trial_load=trial_load, model="m", out_dir=tmp_path, s=settings, server=None)


def test_a_rival_is_not_stepped_down_to_the_load_where_a_pick_already_holds(tmp_path: Path):
    from perfkit.tuner._confirm import confirm_one
    from perfkit.tuner._settings import confirmation_reserve_s

    measured: list[float] = []
    t = _runner_over_above_660(tmp_path, measured)
    trial_load = t.trial_load
    cs = ConfirmSettings(repeats=2, min_windows=1, max_windows=1)
    start = trial_load.level(717.0)
    alone = confirm_one(t, 1, start, cs)  # type: ignore[arg-type]  # a stand-in with the runner's fields
    assert alone.held and alone.load.value < 717.0 and alone.searched_load == start  # stepped down
    measured.clear()
    rival = confirm_one(t, 2, start, cs, floor=alone.load.value)  # type: ignore[arg-type]  # as above
    assert not rival.held and "another pick already holds" in rival.note
    assert min(measured) > alone.load.value  # never measured at the held pick's load
    # --max-time leaves room for this: (2 x repeats + the extra runs at the edge) x (confirm time +
    # warm-up + 1 s), and the longer warm-up after the two configs put
    from perfkit.tuner import TuneSettings

    s = TuneSettings(model="m", budget=Budget(20), trials=1)
    repeat_s = 5.0 + s.warmup_s + 1.0
    reloads_s = 2 * (s.reload_warmup_s - s.warmup_s)
    assert confirmation_reserve_s(s) == pytest.approx((2 * 3 + ConfirmSettings().extra_repeats) * repeat_s + reloads_s)
    assert confirmation_reserve_s(dataclasses.replace(s, confirm_repeats=0)) == 0.0


def test_a_rate_one_repeat_rules_out_is_not_repeated_and_the_claim_steps_down(tmp_path: Path):
    from perfkit.tuner._confirm import confirm_one

    measured: list[float] = []
    t = _runner_over_above_660(tmp_path, measured)
    trial_load = t.trial_load
    conf = confirm_one(t, 1, trial_load.level(717.0), ConfirmSettings(repeats=3, min_windows=1, max_windows=1))  # type: ignore[arg-type]  # a stand-in with the runner's fields
    # 717 read over the budget in its first run: no claim could hold there, so it was not run again;
    # the next rate down (657) held in all three runs
    assert measured == [717.0, 657.0, 657.0, 657.0], measured
    assert conf.held and conf.repeats == 3 and conf.load.value == 657.0
    assert "over the budget in 1 of 1 runs, the other 2 not run: no claim could hold here" in conf.note
    # A run within the budget whose own upper bound is over it rules the rate out too
    lv = _repeats([48])[0]
    wide = dataclasses.replace(lv, precision=dataclasses.replace(lv.precision, latency_rel=0.10))
    out = summarize_repeats(C8, [wide], repeats=3, budget_ms=50, percentile=99, metric="latency")
    assert not out.held and "upper bound" in out.note and "the other 2 not run" in out.note


def _study_of(candidates: dict[str, float], *, latency_us: dict[str, float] | None = None,
              throughput: dict[str, float] | None = None, latency_rel: dict[str, float] | None = None):  # fmt: skip
    """An in-memory study holding one feasible trial per config name, each with the rate its search
    read (open loop) as its load and figure (its throughput there where `throughput` names it,
    its latency there where `latency_us` does, that reading's ~95% half-width where `latency_rel`
    does)."""
    import optuna

    study = optuna.create_study(direction="maximize")
    for name, rate in candidates.items():
        load = {"mode": "request_rate", "value": rate, "distribution": "poisson"}
        rel = {"latency_rel": latency_rel[name]} if latency_rel and name in latency_rel else {}
        attrs = {"params": {"cfg": name}, "config_pbtxt": name, "feasible": True, "metrics": rel,
                 "throughput_infer_per_s": (throughput or {}).get(name, rate), "load": load}  # fmt: skip
        if latency_us and name in latency_us:
            attrs["latency_us"] = latency_us[name]
        study.add_trial(optuna.trial.create_trial(value=rate, user_attrs=attrs))
    return study


def _runner_of(tmp_path: Path, limits: dict[str, float]):
    """A stand-in runner serving configs by name (put_candidate), each within a 150 ms p99 budget
    up to its rate in `limits` (open loop); returns it, the configs put, the (config, rate)
    measured and the events emitted."""
    from types import SimpleNamespace

    from perfkit.gate.synthetic import synthetic_record

    serving: list[str] = []
    measured: list[tuple[str, float]] = []
    events: list = []

    def measure(server, spec, *, command=(), record_path=None):
        lv = spec.levels[0]
        measured.append((serving[-1], lv.value))
        within = lv.value <= limits[serving[-1]]
        level = dataclasses.replace(
            synthetic_level(concurrency=lv.value, latency_ms=100.0 if within else 200.0, noise=0.0, open_loop=True),
            load=lv, sent_rps=lv.value, completed_rps=lv.value, throughput_infer_per_s=lv.value, duration_s=5.0,
        )  # fmt: skip
        return synthetic_record([level], model=spec.model)

    trial_load = TrialLoadSettings(budget=Budget(150), load_mode="rate", max_rate_rps=10_000.0)
    settings = SimpleNamespace(command=(), budget=Budget(150.0, 99.0, "latency"), max_time_s=None)
    t = SimpleNamespace(measure=measure, trial_load=trial_load, model="m", out_dir=tmp_path, s=settings, server=None,
                        put_candidate=serving.append, emit=events.append, started=0.0,
                        search=MeasuredSearch("measured"))  # fmt: skip
    return t, serving, measured, events


def test_a_demoted_pick_is_taken_up_again_when_a_lower_claim_holds(tmp_path: Path):
    """The search read A at 1000 req/s and B at 760; A holds only up to 800 and B up to 700. A fails
    its search's load and two steps down and is demoted; B holds two steps below its reading. A is
    then taken up again below where it failed, down to where it could no longer beat B's claim, holds
    there, and is the pick: the config the search read best was the better one, a few steps down."""
    from perfkit.tuner._confirm import confirm_picks, confirmations

    limits = {"A": 800.0, "B": 700.0}
    t, serving, measured, events = _runner_of(tmp_path, limits)
    study = _study_of({"A": 1000.0, "B": 760.0})
    confirm_picks(t, study, ConfirmSettings(repeats=3, min_windows=1, max_windows=1))  # type: ignore[arg-type]  # a stand-in with the runner's fields
    conf = confirmations(study)
    a, b = conf[0], conf[1]
    assert b.held and 650.0 < b.load.value <= 700.0
    assert a.held and b.load.value < a.load.value <= 800.0, (a, measured)
    assert a.searched_load is not None and a.searched_load.value == 1000.0
    assert "taken up again" in a.note
    again = [e.line() for e in events if getattr(e, "again", False)]  # the progress line says why A is back
    assert len(again) == 1 and again[0].startswith("confirm trial 0 (") and "taken up again" in again[0], again
    # A was never measured at or below B's claim, nor anywhere twice over the budget
    a_rates = [r for name, r in measured if name == "A"]
    assert min(a_rates) > b.throughput_infer_per_s
    over = [r for r in a_rates if r > 800.0]
    assert len(over) == len(set(over)), over  # each rate over its limit tried once (one repeat rules it out)
    # Where nothing holds, each is taken down to half its search's load, no further
    measured.clear()
    limits.update(A=300.0, B=200.0)
    study3 = _study_of({"A": 1000.0, "B": 900.0})
    confirm_picks(t, study3, ConfirmSettings(repeats=3, min_windows=1, max_windows=1))  # type: ignore[arg-type]  # as above
    a3, b3 = confirmations(study3)[0], confirmations(study3)[1]
    assert not a3.held and not b3.held
    assert "as no other config held" in a3.note and "under 50% of its search's load" in a3.note, a3.note
    assert (
        min(r for name, r in measured if name == "A") > 500.0 and min(r for name, r in measured if name == "B") > 450.0
    )
    limits.update(A=800.0, B=700.0)
    # Nothing is taken up when the pick held: B's search read above A's claim only if it held
    measured.clear()
    study2 = _study_of({"A": 780.0, "B": 690.0})
    confirm_picks(t, study2, ConfirmSettings(repeats=3, min_windows=1, max_windows=1))  # type: ignore[arg-type]  # as above
    assert confirmations(study2)[0].held and {name for name, _ in measured} == {"A"}


def test_a_demoted_pick_is_not_taken_up_again_at_a_rate_that_could_only_tie_the_claim_held(tmp_path: Path):
    """The search read A at 1000 req/s and B at 760; A holds up to 750, B up to 700. A fails 1000,
    917 and 841 and is demoted; B holds at 697, one step below its reading. A is taken up again at
    771 (fails); the next rate on its ladder, 707, is 1.4% above B's claim: within half a ladder
    step, where it could beat B only by noise, so it is not tried and B stays the pick."""
    from perfkit.tuner._confirm import TIE_ABOVE, confirm_picks, confirmations

    t, _, measured, _ = _runner_of(tmp_path, {"A": 750.0, "B": 700.0})
    study = _study_of({"A": 1000.0, "B": 760.0})
    confirm_picks(t, study, ConfirmSettings(repeats=3, min_windows=1, max_windows=1))  # type: ignore[arg-type]  # a stand-in with the runner's fields
    a, b = confirmations(study)[0], confirmations(study)[1]
    assert b.held and b.load.value == 697.0
    assert not a.held and "not tried at 707 req/s" in a.note, a.note
    a_rates = [r for name, r in measured if name == "A"]
    assert 771.0 in a_rates and min(a_rates) > b.load.value * TIE_ABOVE, a_rates


def test_a_rival_whose_search_load_only_ties_the_claim_held_is_not_confirmed(tmp_path: Path):
    """A's search read 1000 req/s, B's 850; A holds only up to 845, so it holds at 841 (two steps
    down). B's load, 850, is within half a ladder step of A's claim: three longer runs there could
    only tie it, by noise, so B is not run and A is the pick. Before, B ran 3 runs at 850."""
    from perfkit.tuner._confirm import confirm_picks, confirmations
    from perfkit.tuner._events import ConfirmSkipped

    t, _, measured, events = _runner_of(tmp_path, {"A": 845.0, "B": 900.0})
    study = _study_of({"A": 1000.0, "B": 850.0})
    confirm_picks(t, study, ConfirmSettings(repeats=3, min_windows=1, max_windows=1))  # type: ignore[arg-type]  # a stand-in with the runner's fields
    conf = confirmations(study)
    assert conf[0].held and conf[0].load.value == 841.0
    assert 1 not in conf and {name for name, _ in measured} == {"A"}
    skipped = [e.line() for e in events if isinstance(e, ConfirmSkipped)]
    assert skipped == ["confirm trial 1 (cfg=B): not run, at 850 req/s poisson it could only tie the claim held at "
                       "841 req/s poisson"], skipped  # fmt: skip
    # One a full half step above the claim is confirmed as before
    t, _, measured, _ = _runner_of(tmp_path, {"A": 845.0, "B": 900.0})
    study = _study_of({"A": 1000.0, "B": 890.0})
    confirm_picks(t, study, ConfirmSettings(repeats=3, min_windows=1, max_windows=1))  # type: ignore[arg-type]  # as above
    assert confirmations(study)[1].held and ("B", 890.0) in measured


def test_at_a_rate_a_config_read_with_more_room_failed_one_read_with_less_starts_a_step_below(tmp_path: Path):
    """The request path bounds A, B and C alike and the predicted search read each at its capacity,
    5100 req/s: A with p99 84 ms there, B 138 and C 126. A is confirmed first, fails 5100 and holds
    4680, a step down. B and C, read with less room at the rate A failed, are not run there (before,
    each failed its first run there: 24 s on onnx_mlp); a step below, they could only tie A's claim."""
    from perfkit.tuner._confirm import confirm_picks, confirmations
    from perfkit.tuner._events import ConfirmSkipped

    t, _, measured, events = _runner_of(tmp_path, {"A": 4900.0, "B": 4900.0, "C": 4900.0})
    t.trial_load = TrialLoadSettings(budget=Budget(150), load_mode="rate", max_rate_rps=20_000.0)
    study = _study_of({"A": 5100.0, "B": 5100.0, "C": 5100.0},
                      latency_us={"A": 84_000.0, "B": 138_000.0, "C": 126_000.0})  # fmt: skip
    confirm_picks(t, study, ConfirmSettings(repeats=3, min_windows=1, max_windows=1))  # type: ignore[arg-type]  # a stand-in with the runner's fields
    conf = confirmations(study)
    assert list(conf) == [0] and conf[0].held and conf[0].load.value == 4680.0
    assert {name for name, _ in measured} == {"A"}, measured
    skipped = [e.line() for e in events if isinstance(e, ConfirmSkipped)]
    assert skipped == [
        f"confirm trial {n} (cfg={name}): not run, not at 5100 req/s poisson: trial 0 failed it, its p99 there not"
        " surely higher; at 4680 req/s poisson it could only tie the claim held at 4680 req/s poisson"
        for n, name in ((2, "C"), (1, "B"))
    ], skipped
    # One read there with a p99 surely lower than A's (their readings' ~95% intervals apart) is run
    # there; one read with a p99 A's interval reaches is not
    from perfkit.tuner._confirm import _failed_above

    level = t.trial_load.level(5100.0)
    a, b = study.trials[0], study.trials[1]
    assert _failed_above({(5100.0, 1.0): a}, level, level, b, 1.0) == 0
    assert _failed_above({(5100.0, 1.0): b}, level, level, a, 1.0) is None  # 84 ms against 138: surely lower
    assert _failed_above({(5100.0, 1.0): a}, t.trial_load.level(4680.0), level, b, 1.0) is None  # started elsewhere
    close = _study_of({"A": 5100.0, "B": 5100.0}, latency_us={"A": 84_000.0, "B": 90_000.0},
                      latency_rel={"A": 0.05, "B": 0.05})  # fmt: skip
    assert _failed_above({(5100.0, 1.0): close.trials[0]}, level, level, close.trials[1], 1.0) == 0
    assert _failed_above({(5100.0, 1.0): close.trials[1]}, level, level, close.trials[0], 1.0) == 1  # 88.2 > 85.5


def test_of_rivals_at_one_rate_whose_latency_readings_overlap_the_one_measured_first_goes_first(tmp_path: Path):
    """A trial's short level reads its p99 within 10-25%. Two configs the search read at one rate,
    A (measured first: the predicted search's order, the most room first) with p99 13.9 ms +-20%,
    B with 10.1 ms +-20%: the readings cannot tell them apart, so A is confirmed first (before, B
    was, by its lower reading, and was the pick where perf_analyzer then held A at 1.11x it). Read
    within +-5% each, B's is surely lower and B goes first."""
    from perfkit.tuner._confirm import _candidates

    for rel, first in ((0.20, "A"), (0.05, "B")):
        study = _study_of({"A": 5720.0, "B": 5720.0}, latency_us={"A": 13_900.0, "B": 10_100.0},
                          latency_rel={"A": rel, "B": rel})  # fmt: skip
        order = [ft.user_attrs["params"]["cfg"] for ft in _candidates(study, ConfirmSettings())]
        assert order[0] == first, (rel, order)
    # no interval recorded: the readings are taken as exact
    study = _study_of({"A": 5720.0, "B": 5720.0}, latency_us={"A": 13_900.0, "B": 10_100.0})
    assert [ft.user_attrs["params"]["cfg"] for ft in _candidates(study, ConfirmSettings())] == ["B", "A"]


def test_a_capped_confirmation_starts_at_the_cap_and_tells_the_search_load(tmp_path: Path):
    """The predicted search caps the confirmation of a trial that read past the request path's
    calibrated capacity at its prediction: A's search read 9870 req/s, the path carries 7700, the
    cap is 7614. It is confirmed at the highest rate of its search's ladder under the cap, 7610, in
    3 runs, never at 9870, 9050 or 8300 (nor at 7614 and then 7610, a step apart by 0.05%), and
    its claim says where the search read it."""
    from perfkit.tuner._confirm import confirm_picks, confirmations

    t, _, measured, _ = _runner_of(tmp_path, {"A": 7700.0})
    t.trial_load = TrialLoadSettings(budget=Budget(150), load_mode="rate", max_rate_rps=20_000.0)
    t.search = SimpleNamespace(confirm_cap={0: 7614.0}.get)
    study = _study_of({"A": 9870.0})
    confirm_picks(t, study, ConfirmSettings(repeats=3, min_windows=1, max_windows=1))  # type: ignore[arg-type]  # a stand-in with the runner's fields
    a = confirmations(study)[0]
    assert measured == [("A", 7610.0)] * 3, measured
    assert a.held and a.load.value == 7610.0 and a.searched_load is not None and a.searched_load.value == 9870.0
    assert a.note.startswith("started at 7610 req/s poisson, the request path's calibrated capacity")
    assert "(stepped down from 9870 req/s poisson)" in describe(a, 99.0, "latency")
    # A cap a rounding under a rate of the ladder is that rate (8947 predicted: its ladder's 8950),
    # here the search's own load: confirmed there, as without a cap (before: from 8210, a step down)
    t, _, measured, _ = _runner_of(tmp_path, {"A": 9_000.0})
    t.trial_load = TrialLoadSettings(budget=Budget(150), load_mode="rate", max_rate_rps=20_000.0)
    t.search = SimpleNamespace(confirm_cap={0: 8947.0}.get)
    study = _study_of({"A": 8950.0})
    confirm_picks(t, study, ConfirmSettings(repeats=3, min_windows=1, max_windows=1))  # type: ignore[arg-type]  # as above
    assert measured == [("A", 8950.0)] * 3 and confirmations(study)[0].searched_load is None, measured
    # No cap, or one at or above the search's load: the confirmation starts at the search's load
    for cap in (None, 9870.0, 12_000.0):
        t, _, measured, _ = _runner_of(tmp_path, {"A": 10_000.0})
        t.trial_load = TrialLoadSettings(budget=Budget(150), load_mode="rate", max_rate_rps=20_000.0)
        t.search = SimpleNamespace(confirm_cap={0: cap}.get)
        study = _study_of({"A": 9870.0})
        confirm_picks(t, study, ConfirmSettings(repeats=3, min_windows=1, max_windows=1))  # type: ignore[arg-type]  # as above
        assert measured == [("A", 9870.0)] * 3 and confirmations(study)[0].searched_load is None


def test_of_rivals_that_held_the_same_rate_the_one_with_the_lower_latency_there_is_confirmed_and_claimed(
    tmp_path: Path,
):
    """Three configs the search read at one arrival rate (the predicted search ends every config
    the request path bounds at the path's ceiling): B read p99 3 ms there, A and C 9 ms and 7 ms,
    and A's throughput there came out a little higher (the arrivals' noise). B is confirmed first
    and is the pick; A and C could only tie it and are not run. Before, A was: the throughputs at
    one rate ranked them by chance."""
    from perfkit.tuner._confirm import confirm_picks, confirmations

    t, _, measured, _ = _runner_of(tmp_path, {"A": 1000.0, "B": 1000.0, "C": 1000.0})
    study = _study_of({"A": 850.0, "B": 850.0, "C": 850.0}, latency_us={"A": 9_000.0, "B": 3_000.0, "C": 7_000.0},
                      throughput={"A": 852.0, "B": 848.0, "C": 848.0})  # fmt: skip
    confirm_picks(t, study, ConfirmSettings(repeats=3, min_windows=1, max_windows=1))  # type: ignore[arg-type]  # a stand-in with the runner's fields
    conf = confirmations(study)
    assert list(conf) == [1] and conf[1].held and conf[1].load.value == 850.0
    assert {name for name, _ in measured} == {"B"}
    # A rate held above the others still comes first, whatever its latency there
    study = _study_of({"A": 980.0, "B": 850.0, "C": 850.0}, latency_us={"A": 9_000.0, "B": 3_000.0, "C": 7_000.0})
    measured.clear()
    confirm_picks(t, study, ConfirmSettings(repeats=3, min_windows=1, max_windows=1))  # type: ignore[arg-type]  # as above
    assert confirmations(study)[0].held and measured[0][0] == "A"


def test_a_demoted_pick_is_taken_up_again_before_a_config_read_far_lower_is_confirmed(tmp_path: Path):
    """stream_held: the search read 3 instances (A) at 115 req/s and your config (B) at 14; A holds
    only up to 85. A fails its search's load and its steps and is demoted; B read under half of A's
    reading, the lowest A is taken down to, so B's claim could not stop A: A is taken up again
    first, holds a few steps down, and B is never confirmed (its 35 s runs at 14 req/s had spent
    the rest of --max-time before A's turn came)."""
    from perfkit.tuner._confirm import confirm_picks, confirmations

    t, serving, measured, events = _runner_of(tmp_path, {"A": 85.0, "B": 14.0})
    study = _study_of({"A": 115.0, "B": 14.0})
    confirm_picks(t, study, ConfirmSettings(repeats=3, min_windows=1, max_windows=1))  # type: ignore[arg-type]  # a stand-in with the runner's fields
    conf = confirmations(study)
    a = conf[0]
    assert a.held and 70.0 < a.load.value <= 85.0, (a, measured)
    assert "taken up again before a config read far lower is confirmed" in a.note, a.note
    assert 1 not in conf and set(serving) == {"A"}, (conf, serving)
    # Where A holds nothing above B's reading, B is confirmed after it, and A is not taken up again
    measured.clear()
    t, serving, measured, _ = _runner_of(tmp_path / "b", {"A": 10.0, "B": 14.0})
    study = _study_of({"A": 115.0, "B": 14.0})
    confirm_picks(t, study, ConfirmSettings(repeats=3, min_windows=1, max_windows=1))  # type: ignore[arg-type]  # as above
    conf = confirmations(study)
    assert not conf[0].held and conf[1].held and conf[1].load.value == 14.0
    assert min(r for name, r in measured if name == "A") > 14.0  # never taken below what B read
    assert serving.index("B") > len(serving) - 3  # B confirmed last: A's second pass came first

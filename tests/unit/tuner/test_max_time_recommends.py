"""--max-time always leaves a recommendation when any config held: a trial whose load search the
deadline cut keeps its best held level (a lower bound), and where every confirmation failed the
tune recommends what held (an unconfirmed trial, else "keep your config" with its search's figure)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest

from perfkit import objectives
from perfkit.gate.synthetic import synthetic_level, synthetic_record
from perfkit.records import Budget, Confirmation, LoadLevel, Machine, TrialRecord, TuneRecord
from perfkit.tuner import TuneSettings, judge_trial
from perfkit.tuner._find_load import TrialLoadSettings
from perfkit.tuner._record import summary
from perfkit.tuner._trial import TrialRunner
from perfkit.tuner._trial_cut import cut_note, cut_record, cut_verdict

RATE = TrialLoadSettings(budget=Budget(20.0, percentile=99), load_mode="rate")


def _rate_level(rps: float, latency_ms: float):
    lv = synthetic_level(concurrency=rps, latency_ms=latency_ms, open_loop=True, noise=0.0)
    return dataclasses.replace(lv, sent_rps=rps, completed_rps=rps)


def test_a_cut_search_is_judged_on_the_levels_of_its_own_load_mode_and_its_figure_is_a_lower_bound():
    probe = synthetic_level(concurrency=1, latency_ms=2.0, noise=0.0)  # the open-loop search's closed-loop probe
    rec = synthetic_record([probe, _rate_level(100.0, 5.0), _rate_level(200.0, 40.0)])
    kept = cut_record(rec, RATE)
    assert kept is not None and [lv.load.mode for lv in kept.levels] == ["request_rate", "request_rate"]
    assert cut_record(synthetic_record([probe]), RATE) is None  # only the probe: nothing judges a rate
    assert cut_record(None, RATE) is None
    note = cut_note(190.0, 2)
    assert note == "load search cut by --max-time 190 s after 2 levels"
    v = cut_verdict(judge_trial(kept, RATE.budget), note)
    assert v.feasible_load == LoadLevel("request_rate", 100.0, "poisson") and v.search_cut == note
    assert v.metrics["rate_lower_bound"] == 1.0
    # every level over: no lower bound to mark, the reason still told
    over = cut_verdict(judge_trial(synthetic_record([_rate_level(100.0, 40.0)]), RATE.budget), note)
    assert over.feasible_load is None and "rate_lower_bound" not in over.metrics and over.lowest_over_budget


def _runner(events: list) -> SimpleNamespace:
    return SimpleNamespace(s=TuneSettings(model="m", budget=Budget(20)), trial_load=SimpleNamespace(open_loop=True),
                           space=SimpleNamespace(gpus=0), emit=events.append)  # fmt: skip


def test_a_cut_trial_that_held_a_level_completes_saying_so_and_one_that_held_none_is_pruned_saying_so():
    events: list = []
    study = optuna.create_study(direction="maximize")
    note = cut_note(300.0, 7)
    held = cut_verdict(judge_trial(synthetic_record([_rate_level(100.0, 5.0), _rate_level(200.0, 40.0)]),
                                   RATE.budget), note)  # fmt: skip
    TrialRunner._tell(_runner(events), study, study.ask(), held, 0.1, 2.0, 2.5)  # type: ignore[arg-type]  # a stand-in with the fields _tell reads
    done = study.trials[-1]
    assert done.state == optuna.trial.TrialState.COMPLETE and done.user_attrs["metrics"]["rate_lower_bound"] == 1.0
    assert "within budget, at least (load search cut by --max-time 300 s after 7 levels)" in events[-1].line()
    over = cut_verdict(judge_trial(synthetic_record([_rate_level(100.0, 40.0)]), RATE.budget), note)
    TrialRunner._tell(_runner(events), study, study.ask(), over, 0.1, 2.0, 2.5)  # type: ignore[arg-type]  # as above
    assert study.trials[-1].state == optuna.trial.TrialState.PRUNED
    assert (
        events[-1]
        .line()
        .endswith(
            "at the lowest load tried is over the budget (load search cut by --max-time 300 s after 7 levels) (2.5 s)"
        )
    )


C4 = LoadLevel("concurrency", 4.0)


def _trial(n: int, tput: float, conf: Confirmation | None, *, original: bool = False) -> TrialRecord:
    return TrialRecord(n, "complete", {"instance_count": n + 1}, C4, tput, 15_000.0, True, is_original=original,
                       confirmation=conf)  # fmt: skip


FAILED = Confirmation(False, LoadLevel("concurrency", 2.0), 3, 0.0, 0.0, 0.0, 30_000.0, 31_000.0,
                      searched_load=C4, note="over the budget in 3 of 3 runs")  # fmt: skip
HELD = Confirmation(True, C4, 3, 400.0, 390.0, 410.0, 15_000.0, 16_000.0)


def test_where_every_confirmation_failed_the_recommendation_is_what_held_never_a_demoted_change():
    best = objectives.get("throughput").best
    orig, top = _trial(0, 300.0, FAILED, original=True), _trial(1, 900.0, FAILED)
    unconfirmed = _trial(2, 500.0, None)
    # a held confirmation wins as before
    assert best([orig, top, unconfirmed, _trial(3, 450.0, HELD)]).number == 3  # type: ignore[union-attr]  # not None: asserted by the value
    # none held: the trial never confirmed (the time ran out before it), by its search's reading
    assert best([orig, top, unconfirmed]) is unconfirmed
    # none left: keep your config, its search's figure; a demoted change alone is never recommended
    assert best([orig, top]) is orig
    assert best([top]) is None
    assert best([dataclasses.replace(orig, feasible=False), top]) is None


def test_the_summary_and_the_report_say_keep_your_config_with_its_unconfirmed_figure(tmp_path: Path):
    from perfkit.report._tune import recommendation

    rec = TuneRecord("0", "now", (), Machine.from_mapping({}), {}, "m", Budget(20.0, 99.0), "throughput", "", None,
                     None, (_trial(0, 300.0, FAILED, original=True), _trial(1, 900.0, FAILED)))  # fmt: skip
    assert rec.best() is rec.trials[0]
    rec = dataclasses.replace(rec, best_trial=0)
    text = "\n".join(summary(rec, tmp_path).lines)
    assert "nothing to recommend" not in text
    assert (
        "keep your config (trial 0): no confirmation held; the search read 300.0 infer/s at concurrency 4, "
        "p99 15.00 ms, once, and its own confirmation did not hold it (over the budget in 3 of 3 runs)"
    ) in text, text
    assert "demoted (confirmation failed): trial(s) 0, 1" in text
    sentence = recommendation(rec)
    assert sentence.startswith("Keep your config: no confirmation held.") and "300" in sentence, sentence


def test_an_unconfirmed_recommendation_is_told_as_the_searchs_one_reading_saying_why(tmp_path: Path):
    trials = (_trial(0, 300.0, FAILED, original=True), _trial(1, 900.0, FAILED), _trial(2, 500.0, None))
    rec = TuneRecord("0", "now", (), Machine.from_mapping({}), {}, "m", Budget(20.0, 99.0), "throughput", "", None,
                     None, trials)  # fmt: skip
    rec = dataclasses.replace(rec, best_trial=rec.best().number)  # type: ignore[union-attr]  # not None: trial 2 is feasible and stands
    text = "\n".join(summary(rec, tmp_path).lines)
    assert "best: trial 2 " in text and "500.0 infer/s" in text, text
    assert "--max-time ended the confirmations before it and every config confirmed was demoted" in text, text
    assert "the search's one reading, no interval" in text, text
    # no confirmation ran at all: told as such, not as a demotion
    alone = dataclasses.replace(rec, trials=(_trial(2, 500.0, None),), best_trial=2)
    line = next(x for x in summary(alone, tmp_path).lines if x.startswith("best:"))
    told = "(not confirmed (no confirmation ran before the tune ended): the search's one reading, no interval)"
    assert line.endswith(told), line


def test_planning_from_a_tune_whose_original_failed_its_confirmation_is_refused_naming_why():
    from perfkit.capacity._plan import evidence_from_tune
    from perfkit.errors import InputError

    rec = TuneRecord("0", "now", (), Machine.from_mapping({}), {}, "m", Budget(20.0, 99.0), "throughput", "", None,
                     None, (_trial(0, 300.0, FAILED, original=True),))  # fmt: skip
    with pytest.raises(InputError, match="did not hold its confirmation"):
        evidence_from_tune(rec)


def test_until_a_trial_is_measured_the_search_may_take_the_confirmations_share_of_max_time():
    """The search leaves confirmation its share of --max-time only once there is a pick to confirm:
    a calibration (or a slow first trial) that took the search's share still leaves a config measured."""
    s = TuneSettings(model="m", budget=Budget(20), max_time_s=100.0, confirm_repeats=3)
    runner = SimpleNamespace(s=s, started=1000.0)
    search_s = s.search_time_s()
    assert search_s is not None and 50.0 <= search_s < 100.0
    study = optuna.create_study(direction="maximize")
    assert TrialRunner.search_deadline(runner, study) == 1100.0  # type: ignore[arg-type]  # a stand-in with the fields it reads
    study.tell(study.ask(), 1.0)
    assert TrialRunner.search_deadline(runner, study) == 1000.0 + search_s  # type: ignore[arg-type]  # as above
    no_limit = SimpleNamespace(s=TuneSettings(model="m", budget=Budget(20), trials=3), started=0.0)
    assert TrialRunner.search_deadline(no_limit, study) is None  # type: ignore[arg-type]  # as above

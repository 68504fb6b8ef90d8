"""Parameter importance as the tune prints it: only from MIN_TRIALS completed trials, with its spread
over bootstrap resamples, never a knob at 0.00 that the trials show mattering, and no library warning
printed raw."""

from __future__ import annotations

import logging
import random
import warnings

import optuna
import pytest

from perfkit.records import Budget, LoadLevel, Machine, TrialRecord, TuneRecord
from perfkit.tuner import _importance
from perfkit.tuner._importance import MATTERS_FACTOR, MIN_TRIALS, importances, matters, summary_line


def _study(n: int, seed: int = 0) -> optuna.Study:
    """A study whose figure is set by max_queue_delay_us, doubled by fp16, with instance_count noise;
    queue delay exists only with dynamic batching on (a conditional knob: optuna warns of its regimes)."""
    rng = random.Random(seed)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=seed))
    for _ in range(n):
        t = study.ask()
        precision = t.suggest_categorical("precision", ["fp32", "fp16"])
        dyn = t.suggest_categorical("dynamic_batching", [True, False])
        delay = t.suggest_int("max_queue_delay_us", 1, 10_000, log=True) if dyn else 0
        t.suggest_int("instance_count", 1, 4)
        study.tell(t, (2.0 if precision == "fp16" else 1.0) * (100.0 + delay / 50.0) * rng.uniform(0.95, 1.05))
    return study


def test_importance_is_computed_only_from_the_stated_minimum_of_trials():
    assert MIN_TRIALS == 20  # 5 trials in the best quarter, as optuna's PED-ANOVA documentation asks
    assert importances(_study(MIN_TRIALS - 1), "throughput") == _importance.NONE
    got = importances(_study(MIN_TRIALS), "throughput", resamples=10)
    assert set(got.median) == {"precision", "dynamic_batching", "max_queue_delay_us", "instance_count"}
    for k, v in got.median.items():
        assert 0.0 <= got.low[k] <= v <= got.high[k] <= 1.0, (k, got)
    assert list(got.median) == sorted(got.median, key=lambda k: -got.median[k])  # largest first


def test_no_library_warning_escapes_the_importance(recwarn: pytest.WarningsRecorder, caplog, capsys):
    caplog.set_level(logging.DEBUG, logger=_importance.__name__)
    importances(_study(MIN_TRIALS), "throughput", resamples=5)
    assert [str(w.message) for w in recwarn] == []
    out = capsys.readouterr()
    assert "Warning" not in out.out + out.err
    # optuna's own warning on few trials in a regime is logged, not shown
    with _importance.library_warnings_logged():
        warnings.warn("Some regimes for parameter `x` have less than 2 trials.", UserWarning, stacklevel=1)
    assert [str(w.message) for w in recwarn] == []
    assert any("Some regimes" in r.getMessage() for r in caplog.records)


def test_the_cli_routes_warnings_to_logging_not_the_terminal(caplog, capsys):
    from perfkit.cli import warnings_logged

    with caplog.at_level(logging.WARNING, logger="py.warnings"), warnings_logged():
        warnings.warn("optuna says something", UserWarning, stacklevel=1)
    out = capsys.readouterr()
    assert "optuna says something" not in out.out + out.err
    assert any("optuna says something" in r.getMessage() for r in caplog.records)


C4 = LoadLevel("concurrency", 4.0)


def _trial(n: int, tput: float, **params: object) -> TrialRecord:
    return TrialRecord(n, "complete", dict(params), C4, tput, 10_000.0, True)


def _rec(trials: tuple[TrialRecord, ...], **kw: object) -> TuneRecord:
    return TuneRecord("0", "now", (), Machine.from_mapping({}), {}, "m", Budget(20.0, 99.0), "throughput", "", None,
                      None, trials, **kw)  # type: ignore[arg-type]  # the test's importance fields  # fmt: skip


TRIALS = tuple(
    _trial(i, (1.7 if p == "fp16" else 1.0) * (300 + 10 * i), precision=p, max_queue_delay_us=100 * (i + 1))
    for i, p in enumerate(["fp32"] * 7 + ["fp16"] * 3)
)


def test_a_knob_whose_values_best_figures_differ_past_one_readings_resolution_matters():
    got = matters(TRIALS, "throughput")
    # a range knob whose every trial took its own value says nothing by its values' bests
    assert set(got) == {"precision"} and got["precision"] > MATTERS_FACTOR
    # within one reading's resolution: not said to matter
    close = tuple(_trial(i, 100.0 + 3 * i, precision=p) for i, p in enumerate(["fp32", "fp32", "fp16", "fp16"]))
    assert matters(close, "throughput") == {}


def test_a_knob_the_trials_show_mattering_is_never_printed_at_zero():
    rec = _rec(TRIALS, importances={"max_queue_delay_us": 0.97, "precision": 0.0},
               importance_low={"max_queue_delay_us": 0.8, "precision": 0.0},
               importance_high={"max_queue_delay_us": 1.0, "precision": 0.1})  # fmt: skip
    line = summary_line(rec)
    assert line is not None and "precision 0.00" not in line, line
    assert "max_queue_delay_us 0.97 [0.80-1.00]" in line and "precision matters (" in line, line
    assert line.startswith("importance (median [10%-90%] over 30 resamples of the trials): "), line


def test_under_the_minimum_the_summary_says_why_and_what_the_trials_show():
    line = summary_line(_rec(TRIALS))
    assert line is not None and line.startswith(
        f"importance: not shown (10 complete trials; it needs {MIN_TRIALS} to mean something)"
    ), line
    assert "precision (" in line and "0.00" not in line, line
    assert summary_line(_rec(TRIALS[:3])) is None  # too few to say anything, as before
    # a record from before the spread was kept still prints its figures
    old = summary_line(_rec(TRIALS, importances={"precision": 0.6, "max_queue_delay_us": 0.4}))
    assert old == "importance: precision 0.60, max_queue_delay_us 0.40", old


def _space(noise: float = 0.0, seed: int = 0) -> list[tuple[dict, float]]:
    """A predicted space (72 configs): the rate is set by instance_count and max_batch_size; precision
    changes nothing; the original's model name is one value throughout."""
    rng = random.Random(seed)
    out = []
    for count in (1, 2, 3, 4):
        for mbs in (1, 2, 4, 8, 16, 32):
            for precision in ("fp32", "fp16", "int8"):
                rate = 100.0 * count * (1 + mbs / 8) * (1 + rng.uniform(-noise, noise))
                out.append(({"instance_count": count, "max_batch_size": mbs, "precision": precision, "m": "x"}, rate))
    return out


def test_the_predicted_search_ranks_knobs_over_its_predictions_of_the_whole_space():
    got = _importance.predicted_importances(_space(), 0.08, resamples=10)
    assert set(got.median) == {"instance_count", "max_batch_size", "precision"}  # "m" holds one value: left out
    assert got.median["precision"] < min(got.median["instance_count"], got.median["max_batch_size"]), got
    assert got.median["precision"] < 0.1, got
    for k, v in got.median.items():
        assert 0.0 <= got.low[k] <= v <= got.high[k] <= 1.0, (k, got)
    # the spread is the predictions' own error: a larger stated error moves the ranking's range
    wide = _importance.predicted_importances(_space(), 0.6, resamples=10)
    assert sum(wide.high[k] - wide.low[k] for k in wide.median) > sum(got.high[k] - got.low[k] for k in got.median)
    assert _importance.predicted_importances(_space()[: MIN_TRIALS - 1], 0.08) == _importance.NONE


def test_the_record_takes_the_predictions_where_the_predicted_search_scored_a_space():
    study = _study(MIN_TRIALS - 5)  # fewer trials than the trials' importance needs
    imp, over = _importance.tune_importances(study, "throughput", _space(), 0.08)
    assert over == "the predictions of 72 configs" and imp.median and "precision" in imp.median
    # the measured search (no predictions), or a predictor with no calibration: the trials', here too few
    assert _importance.tune_importances(study, "throughput", (), None) == (_importance.NONE, "")
    assert _importance.tune_importances(study, "throughput", _space(), None) == (_importance.NONE, "")
    imp, over = _importance.tune_importances(_study(MIN_TRIALS), "throughput", (), None)
    assert over == "the trials" and imp.median
    rec = _rec(TRIALS, importances=imp.median, importance_low=imp.low, importance_high=imp.high,
               importance_over="the predictions of 72 configs")  # fmt: skip
    line = summary_line(rec)
    assert line is not None and line.startswith(
        "importance (median [10%-90%] over 30 resamples of the predictions of 72 configs): "
    ), line

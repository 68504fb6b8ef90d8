"""Where a trial's load search starts and how far it goes (tuner/_load_start.py): a prediction
is the open-loop start; your config, where it cannot compete, is measured at its prediction only,
in the fewest windows a level takes; a config at the request path's ceiling ends at its
prediction where that holds and stops its walk down at what another config holds."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from perfkit.gate.synthetic import synthetic_level, synthetic_record
from perfkit.records import Budget, ProfileSpec, RunRecord
from perfkit.tuner._find_load import TrialLoadSettings, find_load
from perfkit.tuner._load_start import load_start

OPEN = TrialLoadSettings(budget=Budget(20.0, percentile=99), load_mode="rate", max_rate_rps=10_000.0)
CLOSED = TrialLoadSettings(budget=Budget(20.0, percentile=99))


def _start(trial_load: TrialLoadSettings = OPEN, **kw):
    args = dict(history_start=8.0, queued_rps=None, predicted_rps=None, is_original=False,
                original_at_prediction_only=False, at_path_ceiling=False, held_elsewhere_rps=None)  # fmt: skip
    return load_start(trial_load, **{**args, **kw})


def test_without_a_prediction_the_search_starts_where_similar_trials_point_measured_as_any_level():
    s = _start()
    assert (s.start, s.from_prediction, s.start_suffices, s.held_elsewhere) == (8.0, False, False, None)
    assert s.trial_load == OPEN


def test_in_open_loop_a_prediction_is_the_start_and_a_queued_one_moves_the_search_by_its_tolerance():
    queued = _start(queued_rps=900.0, predicted_rps=700.0)
    assert (queued.start, queued.from_prediction, queued.start_suffices) == (900.0, True, False)
    scored = _start(predicted_rps=700.0)
    assert (scored.start, scored.from_prediction, scored.start_suffices) == (700.0, False, False)
    # closed loop: a rate prediction is no concurrency; the search starts where similar trials point
    closed = _start(CLOSED, predicted_rps=700.0)
    assert (closed.start, closed.start_suffices) == (8.0, False)


def test_your_config_that_cannot_compete_is_measured_at_its_prediction_only_in_the_fewest_windows():
    only = _start(predicted_rps=16.7, is_original=True, original_at_prediction_only=True)
    assert only.start == 16.7 and only.start_suffices
    assert only.trial_load.max_windows == OPEN.min_windows < OPEN.max_windows
    assert dataclasses.replace(only.trial_load, max_windows=OPEN.max_windows) == OPEN  # nothing else changes
    # one that could compete is searched as any config, in as many windows as a level takes
    free = _start(predicted_rps=16.7, is_original=True)
    assert not free.start_suffices and free.trial_load == OPEN
    # another config is never cut short that way, whatever the flag
    other = _start(predicted_rps=16.7, original_at_prediction_only=True)
    assert not other.start_suffices and other.trial_load == OPEN


def test_a_config_at_the_paths_capacity_ends_at_its_prediction_and_stops_at_what_another_holds():
    s = _start(queued_rps=6073.0, at_path_ceiling=True, held_elsewhere_rps=5720.0)
    assert (s.start, s.start_suffices, s.held_elsewhere) == (6073.0, True, 5720.0)
    assert s.trial_load == OPEN  # its levels are measured as any trial's
    # your config is never cut short for being at the capacity
    mine = _start(predicted_rps=6073.0, is_original=True, at_path_ceiling=True, held_elsewhere_rps=5720.0)
    assert (mine.start_suffices, mine.held_elsewhere) == (False, None)


class _Recorder:
    """An open-loop model within the budget up to 400 req/s that keeps each spec it was given."""

    def __init__(self) -> None:
        self.specs: list[ProfileSpec] = []

    def __call__(self, server, spec: ProfileSpec, *, command=(), record_path: Path | None = None) -> RunRecord:
        self.specs.append(spec)
        lv = spec.levels[0]
        level = synthetic_level(concurrency=lv.value, latency_ms=10.0 if lv.value <= 400 else 30.0, noise=0.0,
                                open_loop=True)  # fmt: skip
        return synthetic_record([dataclasses.replace(level, load=lv)], model=spec.model)


def test_the_fewest_windows_reach_the_measurement_your_configs_one_level_is_measured_with():
    only = _start(predicted_rps=200.0, is_original=True, original_at_prediction_only=True)
    rec = _Recorder()
    find_load(rec, None, only.trial_load, "m", only.start, start_suffices=only.start_suffices)
    assert [s.levels[0].value for s in rec.specs] == [200.0]
    assert rec.specs[0].max_trials == rec.specs[0].min_windows == OPEN.min_windows
    anyone = _Recorder()
    find_load(anyone, None, OPEN, "m", 200.0, start_suffices=True)
    assert anyone.specs[0].max_trials == OPEN.max_windows

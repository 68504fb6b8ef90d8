"""Where one trial's load search starts, and how far it has to go: the trial's own decision,
made before anything is measured, from what the search knows of the config (a prediction, the
loads similar trials held, a rate another config holds). Pure: the TrialRunner passes in what
its hooks answered; find_load takes the outcome."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from perfkit.tuner._find_load import TrialLoadSettings


@dataclass(frozen=True)
class LoadHints:
    """What the config search knows of a trial's load before it is measured (the measured
    search knows nothing: every field its default): the rate predicted for its params, whether
    your config is measured at its prediction only, whether the config is predicted at the
    request path's ceiling, and the rate another config holds (asked for every config but yours:
    a predicted config over the budget at or under it could not beat that one)."""

    predicted_rps: float | None = None
    original_at_prediction_only: bool = False
    at_path_ceiling: bool = False
    held_elsewhere_rps: float | None = None


@dataclass(frozen=True)
class LoadStart:
    """How one trial's load search runs (find_load's keywords):

    - `start`: the first load (None: probed, or doubled from one);
    - `from_prediction`: the start is a prediction the trial was queued with (the search moves
      by the predictions' tolerance from it);
    - `start_suffices`: a first level within budget ends the search (the figure is a lower bound);
    - `held_elsewhere`: a rate another config holds, under which the walk down does not go on;
    - `trial_load`: how each level is measured."""

    start: float | None
    from_prediction: bool
    start_suffices: bool
    held_elsewhere: float | None
    trial_load: TrialLoadSettings


def load_start(
    trial_load: TrialLoadSettings,
    *,
    history_start: float | None,
    queued_rps: float | None,
    predicted_rps: float | None,
    is_original: bool,
    original_at_prediction_only: bool,
    at_path_ceiling: bool,
    held_elsewhere_rps: float | None,
) -> LoadStart:
    """One trial's LoadStart. `history_start`: where similar trials point (closed loop's
    adaptive start); `queued_rps`: the prediction the predicted search queued the trial with;
    `predicted_rps`: the prediction for its params otherwise (--search predict scores every
    config); `original_at_prediction_only`: your config cannot compete with the best predicted
    (tuner/_search/_predict.py original_at_prediction); `at_path_ceiling`: the config is predicted
    at the request path's ceiling (tuner/_search/_request_path.py); `held_elsewhere_rps`: the
    highest rate a measured config holds.

    In open loop a prediction is the start. Your config, where it cannot compete, is measured at
    its prediction only, in the fewest windows a level takes: its figure is a lower bound told
    beside the pick's ("at most +N% vs the original"), and on a slow model a level's windows are
    long (each window waits for its requests), so fewer windows save a large part of a short
    tune. A config at the path's ceiling other than yours ends at its prediction where that
    holds. Any predicted config other than yours stops its search where it reads over the budget at
    or under the rate another config holds (held_elsewhere): below it, it could not beat that one
    (issue 52's "no trial longer than its answer needs")."""
    predicted = queued_rps if queued_rps is not None else predicted_rps
    if not trial_load.open_loop or predicted is None or predicted <= 0:
        return LoadStart(history_start, queued_rps is not None, False, None, trial_load)
    capped = at_path_ceiling and not is_original
    original_only = is_original and original_at_prediction_only
    if original_only:
        trial_load = dataclasses.replace(trial_load, max_windows=trial_load.min_windows)
    held = None if is_original else held_elsewhere_rps  # your config's own figure is always measured
    return LoadStart(predicted, queued_rps is not None, original_only or capped, held, trial_load)

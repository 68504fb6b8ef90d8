"""The predicted search as the tuner's strategy: the predictor of the subject's kind
(tuner/_search/_predict.py for one model, _predict_pipeline.py for an ensemble, _predict_bls.py
for a BLS model and the models it calls, _predict_mix.py for a traffic mix) made when the study is
seeded, and asked for what the trials, the stop rule and the confirmation need. A BLS pipeline whose
calls cannot be told goes on with the measured search from its calibration, which the tuner says."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from perfkit.records import Calibration, TuneRecord
from perfkit.tuner._events import TuneEvent
from perfkit.tuner._find_load import TrialLoadSettings
from perfkit.tuner._load_start import LoadHints
from perfkit.tuner._search._measured import MeasuredSearch
from perfkit.tuner._search._model_calibrate import check_predictable
from perfkit.tuner._search._predict import Predictor
from perfkit.tuner._search._predict_bls import BlsPredictor
from perfkit.tuner._search._predict_mix import MixPredictor
from perfkit.tuner._search._predict_pipeline import PipelinePredictor
from perfkit.tuner._search._predict_stream import StreamPredictor
from perfkit.tuner._subject import Subject

if TYPE_CHECKING:
    import optuna

    from perfkit.tuner._trial import TrialRunner


class PredictedSearch:
    """Calibrate, predict the space, measure the best predicted first, stop once the predictions
    held (Predictor); `reason`: why it runs, `told`: the line said under the announcement."""

    queues_batching_seed = False  # the predictions are queued instead
    told_before: TuneEvent | None = None

    def __init__(self, reason: str, make: Callable[[TrialRunner], Predictor], *, told: TuneEvent | None = None):
        self.reason = reason
        self.told = told
        self._make = make
        self.predictor: Predictor | None = None

    @property
    def kind(self) -> Literal["predict"]:
        return "predict"

    @property
    def calibration(self) -> Calibration | None:
        """The calibration the predictions came from (kept in the record however the search ends)."""
        return self.predictor.calibration if self.predictor is not None else None

    @property
    def steer(self) -> bool:
        """Whether a pipeline's trial may queue its bottleneck's neighbour: not while the
        predictions pick the trials (the next best predicted would wait behind it)."""
        return self.predictor.steer if self.predictor is not None else True

    def space_predictions(self) -> Sequence[tuple[dict[str, Any], float]]:
        """The space as the predictions scored it (Predictor.space; empty before the seed, or for a
        predictor that scores no single model's space)."""
        return tuple(self.predictor.space) if self.predictor is not None else ()

    def seed(self, t: TrialRunner, study: optuna.Study) -> None:
        """Calibrate, predict the space and queue the best predicted. Raises as the calibration does."""
        self.predictor = self._make(t)
        self.predictor.seed(study)

    def load_hints(
        self, study: optuna.Study, params: Mapping[str, Any], *, is_original: bool, queued: bool
    ) -> LoadHints:
        p = self.predictor
        if p is None or not p.seeded:
            return LoadHints()
        at_path = not is_original and p.ends_at_path_ceiling(params)
        return LoadHints(
            predicted_rps=None if queued else p.predicted_for(params),
            original_at_prediction_only=p.original_at_prediction_only,
            at_path_ceiling=at_path,
            held_elsewhere_rps=None if is_original else p.held_elsewhere(study),  # a config over under it ends there
        )

    def stop(self, study: optuna.Study) -> str | None:
        return self.predictor.stop(study) if self.predictor is not None else None

    def confirm_cap(self, number: int) -> float | None:
        return self.predictor.confirm_cap(number) if self.predictor is not None else None

    def finish(self, t: TrialRunner, rec: TuneRecord) -> None:
        """What the predictions say of the best after the search (an ensemble's bottleneck step)."""
        ev = self.predictor.summary(rec.best_trial) if self.predictor is not None else None
        if ev is not None:
            t.emit(ev)


def predicted_search(
    subject: Subject, trial_load: TrialLoadSettings, reason: str, *, told: TuneEvent | None
) -> PredictedSearch | MeasuredSearch:
    """The predicted search for the subject's kind: an ensemble's predictor, a BLS pipeline's,
    a traffic mix's (tuner/_search/_predict_mix.py), one model's. Raises UsageError for a BLS
    pipeline under a load the prediction does not model."""
    if subject.kind == "bls":
        check_predictable(trial_load)
    make = {"ensemble": PipelinePredictor, "bls": BlsPredictor, "mix": MixPredictor}.get(subject.kind, Predictor)
    if subject.kind == "model" and trial_load.streaming:
        make = StreamPredictor  # its streams, each holding its instance (tuner/_search/_predict_stream.py)
    return PredictedSearch(reason, make, told=told)

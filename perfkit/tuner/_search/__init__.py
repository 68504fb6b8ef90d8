"""The config search's strategy, as optuna's samplers are to a study: what the search does around
the trials the one TrialRunner runs. MeasuredSearch measures every trial the sampler picks;
PredictedSearch calibrates on the server, predicts the space, measures the best predicted first
and stops once the predictions held. `choose` picks one, once, before the runner is built: the
kind that runs and why live on the Search, and no setting is rewritten."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

from perfkit.tuner._search._kind import ON_RAY, SearchChoice, choose_search
from perfkit.tuner._search._measured import MeasuredSearch
from perfkit.tuner._search._model_calibrate import Calibrated
from perfkit.tuner._search._pipeline_calibrate import PipelineCalibrated
from perfkit.tuner._search._predict import PREDICTED_ATTR, SIM_REQUESTS
from perfkit.tuner._search._predict_points import dimension_values
from perfkit.tuner._search._predicted import PredictedSearch, predicted_search

if TYPE_CHECKING:
    import optuna

    from perfkit.records import Calibration, TuneRecord
    from perfkit.tuner._events import TuneEvent
    from perfkit.tuner._find_load import TrialLoadSettings
    from perfkit.tuner._load_start import LoadHints
    from perfkit.tuner._settings import TuneSettings
    from perfkit.tuner._subject import Subject
    from perfkit.tuner._trial import TrialRunner

__all__ = [
    "MeasuredSearch",
    "PredictedSearch",
    "Search",
    "SearchChoice",
    "choose",
    "shared_choice",
    # what the predicted search tells and stores, for the benchmarks (perfkit.tuner.parts)
    "Calibrated",
    "PipelineCalibrated",
    "PREDICTED_ATTR",
    "SIM_REQUESTS",
    "dimension_values",
]


class Search(Protocol):
    """A config search's strategy over the one trial runner (TrialRunner receives it)."""

    @property
    def kind(self) -> Literal["measure", "predict"]:
        """Which search runs (the record's `search`)."""
        ...

    @property
    def reason(self) -> str:
        """Why it runs: --search auto's reason, or that it was asked for (the record's `search_reason`)."""
        ...

    @property
    def told(self) -> TuneEvent | None:
        """The line said under the tune's announcement (--search auto's choice), if any."""
        ...

    @property
    def told_before(self) -> TuneEvent | None:
        """A line said before the announcement (why a search asked for does not run), if any."""
        ...

    @property
    def queues_batching_seed(self) -> bool:
        """Whether a new study queues the batching seed after your config."""
        ...

    @property
    def calibration(self) -> Calibration | None:
        """The calibration the record keeps (None: nothing calibrated)."""
        ...

    @property
    def steer(self) -> bool:
        """Whether a pipeline's trial may queue its bottleneck step's neighbour."""
        ...

    def space_predictions(self) -> Sequence[tuple[dict[str, Any], float]]:
        """Every point of the space the search predicted, with its predicted rate (empty: none predicted)."""
        ...

    def seed(self, t: TrialRunner, study: optuna.Study) -> None:
        """Queue the first points of the study (inside the guard, before the first trial): the
        subject's seeds, or a calibration's predictions. Raises as measuring does."""
        ...

    def load_hints(
        self, study: optuna.Study, params: Mapping[str, Any], *, is_original: bool, queued: bool
    ) -> LoadHints:
        """What the search knows of a trial's load before it is measured (`queued`: the trial was
        queued with its predicted rate)."""
        ...

    def stop(self, study: optuna.Study) -> str | None:
        """Before each trial: why the search ends now (one more stop rule), else None."""
        ...

    def confirm_cap(self, number: int) -> float | None:
        """The rate at which trial `number`'s confirmation starts at most (None: at its search's load)."""
        ...

    def finish(self, t: TrialRunner, rec: TuneRecord) -> None:
        """After the search and its record: what the search tells of the best."""
        ...


def shared_choice(settings: TuneSettings) -> SearchChoice | None:
    """--ray's search under --search auto: measured (each worker would calibrate and queue its own
    predictions into the one study they share); None where the search was asked for."""
    return SearchChoice("measure", ON_RAY) if settings.search == "auto" else None


def choose(settings: TuneSettings, subject: Subject, trial_load: TrialLoadSettings, *, shared: bool = False) -> Search:
    """The search a tune runs: --search measure or predict as asked, or auto's choice for the
    subject's kind under the trials' load (`trial_load`: open loop or not, its mode) over the
    space's knobs; `shared`: a study several --ray workers share (the launcher told auto's line).
    Raises UsageError for a BLS pipeline asked to be predicted under a load the prediction does
    not model."""
    asked = f"asked for with --search {settings.search}"
    ray = shared_choice(settings) if shared else None
    if ray is not None:
        return MeasuredSearch(ray.why_measured or ON_RAY)
    knobs = [d.name for d in subject.space.dimensions]
    choice = choose_search(settings, subject=subject.kind, open_loop=trial_load.open_loop,
                           load_mode=trial_load.load_mode, knobs=knobs, streaming=trial_load.streaming)  # fmt: skip
    told = choice if settings.search == "auto" else None
    if choice.kind == "measure":
        return MeasuredSearch(choice.why_measured or asked, told=told)
    reason = asked if settings.search != "auto" else "--search auto: the prediction models what was asked"
    return predicted_search(subject, trial_load, reason, told=told)

"""The measured search: every trial measured, the sampler picks the points (after your config,
the batching seed and the subject's own seeds). What it tells the trials is nothing: each load
search starts where similar trials point, and nothing caps a confirmation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from perfkit.records import Calibration, TuneRecord
from perfkit.tuner._events import TuneEvent
from perfkit.tuner._load_start import LoadHints

if TYPE_CHECKING:
    import optuna

    from perfkit.tuner._trial import TrialRunner


@dataclass(frozen=True)
class MeasuredSearch:
    """The measured search and why it runs (`reason`); `told`: the line said under the tune's
    announcement (--search auto's), `told_before`: one said before it (why the predicted search
    asked for does not run); `queues_batching_seed`: whether a new study queues the batching
    seed after your config (not where the predicted search was asked for)."""

    reason: str
    told: TuneEvent | None = None
    told_before: TuneEvent | None = None
    queues_batching_seed: bool = True

    @property
    def kind(self) -> Literal["measure"]:
        return "measure"

    @property
    def calibration(self) -> Calibration | None:
        return None

    @property
    def steer(self) -> bool:
        return True

    def space_predictions(self) -> Sequence[tuple[dict[str, Any], float]]:
        return ()

    def seed(self, t: TrialRunner, study: optuna.Study) -> None:
        """A new study (your config alone queued) under the default sampler: the subject's own
        seeds queued after it (a pipeline's joint batching point)."""
        s = t.s
        if len(study.trials) == 1 and s.sampler == "auto" and (s.trials is None or s.trials > 1):
            for point in t.subject.extra_seeds(t.original_fixed_params()):
                study.enqueue_trial(point, skip_if_exists=True)

    def load_hints(
        self, study: optuna.Study, params: Mapping[str, Any], *, is_original: bool, queued: bool
    ) -> LoadHints:
        return LoadHints()

    def stop(self, study: optuna.Study) -> str | None:
        return None

    def confirm_cap(self, number: int) -> float | None:
        return None

    def finish(self, t: TrialRunner, rec: TuneRecord) -> None:
        """Nothing more to tell after the search."""

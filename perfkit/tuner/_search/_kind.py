"""--search auto, the default: the predicted search (tuner/_search/_predict.py) where it applies, the
measured search elsewhere, with the reason said. The predicted search models one model or an
ensemble under open-loop arrivals, held to a latency percentile, ranked by its rate, over the knobs
the batcher simulator tells apart (tuner/_search/_predict_points.py SIMULATED) and, for one model,
the precision and instance kind it calibrates a curve for at each value (PER_VALUE); anything
else is searched by measurement, as it always was. --search predict and --search measure are taken
as given."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from perfkit.tuner._events import TuneEvent
from perfkit.tuner._pipeline import SEP
from perfkit.tuner._search._predict_points import PER_VALUE, SIMULATED
from perfkit.tuner._settings import TuneSettings
from perfkit.tuner._subject import SubjectKind

# --ray: each worker would calibrate and queue its own predictions into the one study they share
ON_RAY = "a study shared by several workers is searched by measurement"


@dataclass(frozen=True)
class SearchChoice(TuneEvent):
    """The search a tune runs, and why auto chose the measured one (None: as given, or predicted)."""

    kind: Literal["measure", "predict"]
    why_measured: str | None = None
    predict_anyway: bool = False  # --search predict would run here (at the original's other knobs)

    def line(self) -> str:
        """The line the tuner prints for auto's choice."""
        if self.kind == "predict":
            return "  --search auto: predicting (calibrate on the server, predict the space, measure the best)"
        hint = " (--search predict predicts anyway)" if self.predict_anyway else ""
        return f"  --search auto: measuring every trial: {self.why_measured}{hint}"


def choose_search(
    s: TuneSettings,
    *,
    subject: SubjectKind,
    open_loop: bool,
    load_mode: str,
    knobs: Sequence[str],
) -> SearchChoice:
    """The search for settings `s` (search auto, measure or predict) on a subject of that kind,
    under the trials' load (open loop or not, its mode), over the space's dimension names `knobs`
    (a pipeline's "<step>.<knob>")."""
    if s.search != "auto":
        return SearchChoice(s.search)
    why = _cannot_predict(s, subject=subject, open_loop=open_loop, load_mode=load_mode)
    if why is not None:
        return SearchChoice("measure", why)
    why = _should_measure(s, knobs=knobs, subject=subject)
    return SearchChoice("measure", why, predict_anyway=True) if why is not None else SearchChoice("predict")


def _cannot_predict(s: TuneSettings, *, subject: SubjectKind, open_loop: bool, load_mode: str) -> str | None:
    """What the prediction does not model at all (--search predict refuses it, or falls back)."""
    if subject == "mix":
        return "a traffic mix is searched by measurement"
    if subject == "bls":
        return "a BLS model's calls (their order and fan-out) cannot be simulated"
    if subject not in ("model", "ensemble"):  # a kind no predictor models yet
        return f"a {subject} subject is searched by measurement"
    if load_mode == "trace":
        return "a trace's arrivals are replayed, not predicted"
    if not open_loop:
        return "the prediction models open-loop arrival rates, not closed-loop clients"
    if s.budget.metric != "latency":
        return f"a {s.budget.metric.upper()} budget is not simulated (end-to-end latency is)"
    return None


def _should_measure(s: TuneSettings, *, knobs: Sequence[str], subject: SubjectKind = "model") -> str | None:
    """What the predicted search would run without answering as asked (it predicts the knobs the
    simulator tells apart at the original's other values, ranks by the rate, seeds its own study).
    One model's precision and instance kind are calibrated per value (PER_VALUE); an ensemble's
    steps' are not yet."""
    if s.objective != "throughput":
        return f"--objective {s.objective} is not what the prediction ranks (the rate within the budget)"
    if s.sampler != "auto":
        return f"--sampler {s.sampler} walks its own points"
    if s.resume:
        return "a resumed study goes on as it was searched"
    if s.trials == 1:
        return "--trials 1 measures your config alone"
    modelled = set(SIMULATED) | (set(PER_VALUE) if subject == "model" else set())
    unmodelled = sorted({k.rpartition(SEP)[2] for k in knobs} - modelled)
    if unmodelled:
        return f"the space searches {', '.join(unmodelled)}, which the prediction does not model"
    return None

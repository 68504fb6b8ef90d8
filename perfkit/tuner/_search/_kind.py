"""--search auto, the default: the predicted search (tuner/_search/_predict.py) where it applies, the
measured search elsewhere, with the reason said. The predicted search models one model (open or
closed loop or a trace, ranked by the objective, a resumed study by what is left; a decoupled model's
streams under open-loop arrivals), an ensemble, a BLS model or a traffic mix under open-loop arrivals
ranked by its rate, held to a latency percentile, over the knobs the batcher simulator tells apart
(tuner/_search/_predict_points.py SIMULATED) and, for one model and a pipeline's steps, the
precision, instance kind and backend threads and graphs it calibrates a curve for at each value
(PER_VALUE); anything else is searched by measurement, as it always was. --search predict and
--search measure are taken as given."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from perfkit.tuner._events import TuneEvent
from perfkit.tuner._pipeline import SEP
from perfkit.tuner._search._predict_points import PER_VALUE, SIMULATED
from perfkit.tuner._search._stream_kind import stream_unpredictable
from perfkit.tuner._settings import TuneSettings
from perfkit.tuner._space._knob_backend import MEASURED_PER_VALUE
from perfkit.tuner._space._knob_rate_limit import P_RATE_LIMIT
from perfkit.tuner._subject import SubjectKind

_NAMES = {"ensemble": "ensemble", "bls": "BLS model", "mix": "traffic mix"}
# The subjects whose calibration measures a curve at each value of the PER_VALUE knobs: one model
# (tuner/_search/_value_calibrate.py), an ensemble's steps (tuner/_search/_pipeline_calibrate.py)
# and the models a BLS model calls (tuner/_search/_bls_calibrate.py)
PER_VALUE_SUBJECTS = ("model", "ensemble", "bls")
# --ray: each worker would calibrate and queue its own predictions into the one study they share
ON_RAY = "a study shared by several workers is searched by measurement"


@dataclass(frozen=True)
class SearchChoice(TuneEvent):
    """The search a tune runs, and why auto chose the measured one (None: as given, or predicted)."""

    kind: Literal["measure", "predict"]
    why_measured: str | None = None
    predict_anyway: bool = False  # --search predict would run here (at the original's other knobs)
    measured_per_value: tuple[str, ...] = ()  # a backend's threads and graphs: a curve measured at each value

    def line(self) -> str:
        """The line the tuner prints for auto's choice."""
        if self.kind == "predict":
            per_value = ""
            if self.measured_per_value:
                per_value = (
                    f"; {', '.join(self.measured_per_value)}: measured, not simulated (a service curve calibrated"
                    " at each value: what a backend's threads or graphs buy is the model's and the machine's)"
                )
            return (
                f"  --search auto: predicting (calibrate on the server, predict the space, measure the best){per_value}"
            )
        hint = " (--search predict predicts anyway)" if self.predict_anyway else ""
        return f"  --search auto: measuring every trial: {self.why_measured}{hint}"


def choose_search(
    s: TuneSettings,
    *,
    subject: SubjectKind,
    open_loop: bool,
    load_mode: str,
    knobs: Sequence[str],
    streaming: bool = False,
) -> SearchChoice:
    """The search for settings `s` (search auto, measure or predict) on a subject of that kind,
    under the trials' load (open loop or not, its mode), over the space's dimension names `knobs`
    (a pipeline's "<step>.<knob>"); `streaming`: a decoupled model, its responses streamed."""
    if s.search != "auto":
        return SearchChoice(s.search)
    why = _cannot_predict(s, subject=subject, open_loop=open_loop, load_mode=load_mode, streaming=streaming)
    if why is None and streaming:
        why = stream_unpredictable(knobs)
    if why is not None:
        return SearchChoice("measure", why)
    why = _should_measure(s, subject=subject, knobs=knobs)
    if why is not None:
        return SearchChoice("measure", why, predict_anyway=True)
    return SearchChoice(
        "predict", measured_per_value=tuple(k for k in knobs if k.rpartition(SEP)[2] in MEASURED_PER_VALUE)
    )


def _cannot_predict(
    s: TuneSettings, *, subject: SubjectKind, open_loop: bool, load_mode: str, streaming: bool = False
) -> str | None:
    """What the prediction does not model at all (--search predict refuses it, or falls back)."""
    if subject not in ("model", "ensemble", "bls", "mix"):  # a kind no predictor models yet
        return f"a {subject} subject is searched by measurement"
    if load_mode == "trace" and subject != "model":  # one model's: tuner/_search/_predict_load.py
        return f"a {_NAMES[subject]}'s prediction models arrival rates; a trace's arrivals are replayed, not predicted"
    if not open_loop and subject != "model":  # one model's closed loop: tuner/_search/_predict_load.py
        return f"a {_NAMES[subject]}'s prediction models open-loop arrival rates, not closed-loop clients"
    if not open_loop and streaming:  # each client holds its stream open: its latency is the stream's
        return (
            "a decoupled model's closed-loop clients wait on streams of responses, which the prediction does not model"
        )
    if open_loop and s.arrival == "onoff":  # the simulators scale unit-rate arrivals; a burst's ms do not scale
        return "on/off bursts are searched by measurement (the prediction simulates poisson and constant arrivals)"
    if s.budget.metric != "latency" and not streaming:  # a decoupled model's streams: tuner/_search/_predict_stream.py
        return f"a {s.budget.metric.upper()} budget is not simulated (end-to-end latency is)"
    return None


def _should_measure(s: TuneSettings, *, subject: SubjectKind, knobs: Sequence[str]) -> str | None:
    """What the predicted search would run without answering as asked (it predicts the knobs the
    simulator tells apart at the original's other values, ranks one model's configs by the
    objective, tuner/_search/_predict_rank.py, an ensemble's by the rate, seeds its own study).
    One model's, an ensemble's steps' and a BLS model's called models' precision, instance kind
    and a backend's threads and graphs are calibrated per value (PER_VALUE); a mix's models' are
    not yet."""
    if s.objective == "goodput":
        return "--objective goodput counts streamed requests meeting its SLOs, which the prediction does not simulate"
    if s.objective != "throughput" and subject != "model":
        return (
            f"--objective {s.objective} is not what a {_NAMES[subject]}'s prediction ranks (the rate within the budget)"
        )
    if s.sampler != "auto":
        return f"--sampler {s.sampler} walks its own points"
    if s.resume and subject != "model":
        return f"a resumed study of a {_NAMES[subject]} goes on as it was searched"
    if s.trials == 1:
        return "--trials 1 measures your config alone"
    modelled = set(SIMULATED) | (set(PER_VALUE) if subject in PER_VALUE_SUBJECTS else set())
    if subject == "mix":
        modelled.add(P_RATE_LIMIT)  # the mix's simulator runs Triton's rate limiter (predict/_mix_limiter.py)
    unmodelled = sorted({k.rpartition(SEP)[2] for k in knobs} - modelled)
    if unmodelled and subject not in PER_VALUE_SUBJECTS and set(unmodelled) <= set(PER_VALUE):
        return (
            f"the space searches {', '.join(unmodelled)}, whose curves are measured at each value for one model"
            f" or a pipeline's steps only: the {_NAMES[subject]}'s models are not calibrated per value yet"
        )
    if unmodelled:
        return f"the space searches {', '.join(unmodelled)}, which the prediction does not model"
    return None

"""Parameter importance as the tune states it: only with enough trials to mean something, with its
spread, and never a knob at 0.00 that the trials show mattering.

The importance is optuna's PED-ANOVA (PedAnovaImportanceEvaluator, the default evaluator of optuna
5): which knobs the best TOP_QUANTILE of the completed trials share, against all of them. Optuna's
documentation of the evaluator asks for at least MIN_TOP_TRIALS trials above the quantile "to
stabilize the analysis"; fewer, and a single reading decides the ranking (optuna warns "Some regimes
for parameter ... have less than 2 trials"). So it is computed only from MIN_TRIALS completed trials.

Its spread: the importance over RESAMPLES bootstrap resamples of the completed trials (drawn with
replacement, a fixed seed), reported as the median and the SPREAD_QUANTILES range: what other trials
of the same configs could have shown. And a knob whose values' best figures differ by more than one
reading's resolution (MATTERS_FACTOR) is said to matter, whatever its importance rounds to: a ranking
at 0.00 of a knob whose best fp16 config reads 1.7x the best fp32 one is the method's blind spot, not
a finding.

Where the predicted search ran, the importance is computed over the calibrated predictions of the
whole space instead (predicted_importances): every config the simulator scored is a point, its
predicted rate its figure, so the ranking rests on the calibrated model of every config rather than
on the few trials measured. Its spread: the same resamples, each also moving every prediction by the
calibration's stated error (a lognormal factor, Calibration.stated_error_rel): what the predictions
could have said within their own error.

Library warnings (optuna's, above) are logged, never printed: the CLI prints only its lines.
"""

from __future__ import annotations

import logging
import math
import random
import statistics
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState, create_trial

from perfkit import objectives
from perfkit.records import TrialRecord, TuneRecord

log = logging.getLogger(__name__)

TOP_QUANTILE = 0.25  # the best quarter of the trials: what the best configs share
MIN_TOP_TRIALS = 5  # optuna's PED-ANOVA documentation: at least 5 trials above the target quantile
MIN_TRIALS = math.ceil(MIN_TOP_TRIALS / TOP_QUANTILE)  # 20 completed trials
RESAMPLES = 30  # bootstrap resamples: enough for a 10-90% range; each costs a few tens of ms
SPREAD_QUANTILES = (0.1, 0.9)
# A trial's figure is one reading at the open-loop ladder's resolution (2**(1/8), 9%): two configs a
# step either side of one rate read up to two steps (19%) apart with nothing between them. Best
# figures further apart than 20% across a knob's values are past what one reading explains.
MATTERS_FACTOR = 1.2
# A value's best figure counts where at least this many trials took it: a value seen once is one
# config's reading (every trial of a range knob takes its own value, and the best of one is not a knob's doing).
MIN_PER_VALUE = 2
# The predictions' importance: a space larger than this is sampled (a fixed seed) to keep each resample to a
# few hundred ms; an error under this floor is read as this one (no model predicts a rate closer).
MAX_PREDICTED_POINTS = 1500
MIN_PREDICTION_ERROR_REL = 0.05
SHOWN_ZERO = 0.005  # what prints as 0.00
SAID_FROM = 4  # complete trials from which the summary says why no importance is shown (as it showed one before)


@contextmanager
def library_warnings_logged(source: str = "optuna") -> Iterator[None]:
    """Warnings raised inside (a library's: optuna's on few trials, its experimental features) are
    logged at debug, not shown: the library logs, the CLI prints."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for w in caught:
        log.debug("%s: %s: %s", source, w.category.__name__, w.message)


@dataclass(frozen=True)
class Importances:
    """Each knob's importance: the median over the resamples and its SPREAD_QUANTILES range."""

    median: dict[str, float]
    low: dict[str, float]
    high: dict[str, float]


NONE = Importances({}, {}, {})


def _target(objective: str) -> Callable[[FrozenTrial], float] | None:
    if objectives.get(objective).front:
        return lambda t: float(t.values[0])
    return None


def _evaluator() -> Any:
    cls = getattr(optuna.importance, "PedAnovaImportanceEvaluator", None)
    return cls(target_quantile=TOP_QUANTILE) if cls is not None else None  # older optuna: its default


def _one(trials: Sequence[FrozenTrial], direction: Any, objective: str) -> dict[str, float]:
    study = optuna.create_study(directions=direction)
    study.add_trials(trials)
    try:
        imp = optuna.importance.get_param_importances(study, evaluator=_evaluator(), target=_target(objective))
    except (RuntimeError, ValueError, ZeroDivisionError):
        return {}
    return {k: float(v) for k, v in imp.items()}


def importances(study: optuna.Study, objective: str, *, resamples: int = RESAMPLES, seed: int = 0) -> Importances:
    """The importances of the study's completed trials with their spread; NONE under MIN_TRIALS."""
    complete = list(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
    if len(complete) < MIN_TRIALS:
        return NONE
    rng = random.Random(seed)
    runs: list[dict[str, float]] = []
    with library_warnings_logged():
        for _ in range(resamples):
            drawn = [complete[rng.randrange(len(complete))] for _ in complete]
            if imp := _one(drawn, study.directions, objective):
                runs.append(imp)
    return _summarize(runs)


def _summarize(runs: Sequence[dict[str, float]]) -> Importances:
    """The resamples' importances as each knob's median and SPREAD_QUANTILES range, largest first."""
    names = sorted({k for r in runs for k in r})
    if not names:
        return NONE
    per = {k: sorted(r.get(k, 0.0) for r in runs) for k in names}
    median = {k: statistics.median(v) for k, v in per.items()}
    order = sorted(names, key=lambda k: -median[k])
    lo, hi = SPREAD_QUANTILES
    low = {k: _quantile(per[k], lo) for k in order}
    return Importances({k: median[k] for k in order}, low, {k: _quantile(per[k], hi) for k in order})


def _choice(v: Any) -> Any:
    """A knob's value as optuna's categorical choices take it (None, bool, int, float, str)."""
    return v if v is None or isinstance(v, (bool, int, float, str)) else repr(v)


def predicted_importances(points: Sequence[tuple[dict[str, Any], float]], error_rel: float, *,
                          resamples: int = RESAMPLES, seed: int = 0) -> Importances:  # fmt: skip
    """The importances over the predictions of the whole space: `points` are (a config's params, its
    predicted rate); each resample draws the points with replacement and moves each rate by a lognormal
    factor of sigma `error_rel` (MIN_PREDICTION_ERROR_REL at the least). NONE under MIN_TRIALS points."""
    pts = [({k: _choice(v) for k, v in p.items()}, float(r)) for p, r in points if r > 0 and math.isfinite(r)]
    if len(pts) < MIN_TRIALS:
        return NONE
    rng = random.Random(seed)
    if len(pts) > MAX_PREDICTED_POINTS:
        pts = rng.sample(pts, MAX_PREDICTED_POINTS)
    values: dict[str, set[Any]] = {}
    for p, _ in pts:
        for k, v in p.items():
            values.setdefault(k, set()).add(v)
    fixed = {k for k, vs in values.items() if len(vs) < 2}  # a knob the space holds at one value says nothing
    pts = [({k: v for k, v in p.items() if k not in fixed}, r) for p, r in pts]
    dists = {k: CategoricalDistribution(sorted(vs, key=repr)) for k, vs in values.items() if k not in fixed}
    sigma = max(error_rel, MIN_PREDICTION_ERROR_REL)
    runs: list[dict[str, float]] = []
    with library_warnings_logged():
        for _ in range(resamples):
            drawn = [pts[rng.randrange(len(pts))] for _ in pts]
            trials = [create_trial(params=p, distributions={k: dists[k] for k in p},
                                   value=r * math.exp(rng.gauss(0.0, sigma))) for p, r in drawn]  # fmt: skip
            if imp := _one(trials, [StudyDirection.MAXIMIZE], "throughput"):
                runs.append(imp)
    return _summarize(runs)


def tune_importances(study: optuna.Study, objective: str, predictions: Sequence[tuple[dict[str, Any], float]],
                     error_rel: float | None) -> tuple[Importances, str]:  # fmt: skip
    """The record's importances and what they were computed over: over the predictions of the whole space
    where the predicted search scored one (`predictions`, with its calibration's stated error), else over
    the study's completed trials; ("" where none is shown)."""
    if predictions and error_rel is not None:
        got = predicted_importances(predictions, error_rel)
        if got.median:
            return got, f"the predictions of {len(predictions)} configs"
    got = importances(study, objective)
    return got, "the trials" if got.median else ""


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def matters(trials: Sequence[TrialRecord], objective: str) -> dict[str, float]:
    """Knobs whose values' best figures (the complete, feasible trials' objective value at each value
    the knob took in at least MIN_PER_VALUE of them) lie more than MATTERS_FACTOR apart, with that
    factor, largest first."""
    obj = objectives.get(objective)
    seen: dict[str, dict[str, list[float]]] = {}
    for t in trials:
        if t.state != "complete" or not t.feasible or t.throughput_infer_per_s is None:
            continue
        value = obj.value(t.claimed_throughput or t.throughput_infer_per_s, t.metrics)
        for name, v in t.params.items():
            seen.setdefault(name, {}).setdefault(repr(v), []).append(value)
    out = {}
    for name, by_value in seen.items():
        bests = [max(vs) for vs in by_value.values() if len(vs) >= MIN_PER_VALUE]
        if len(bests) > 1 and min(bests) > 0 and max(bests) / min(bests) > MATTERS_FACTOR:
            out[name] = max(bests) / min(bests)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def summary_line(rec: TuneRecord) -> str | None:
    """The summary's importance line: each knob's median and range, a knob the trials show mattering
    never at 0.00; under MIN_TRIALS, why not shown and which knobs matter. None where nothing is to say."""
    shown = matters(rec.trials, rec.objective)
    said = ", ".join(f"{k} ({x:.2f}x between its values' best)" for k, x in shown.items())
    if not rec.importances:
        complete = sum(1 for t in rec.trials if t.state == "complete")
        if complete < SAID_FROM:
            return None
        why = f"importance: not shown ({complete} complete trials; it needs {MIN_TRIALS} to mean something)"
        return f"{why}; the best figure differs by knob: {said}" if said else why
    parts = []
    for k, v in rec.importances.items():
        if k in rec.importance_low and k in rec.importance_high:
            text = f"{k} {v:.2f} [{rec.importance_low[k]:.2f}-{rec.importance_high[k]:.2f}]"
        else:
            text = f"{k} {v:.2f}"  # a record from before the spread was kept
        if v < SHOWN_ZERO and k in shown:
            text = f"{k} matters ({shown[k]:.2f}x between its values' best; the importance misses it)"
        parts.append(text)
    lo, hi = SPREAD_QUANTILES
    over = rec.importance_over or "the trials"
    how = f" (median [{lo:.0%}-{hi:.0%}] over {RESAMPLES} resamples of {over})" if rec.importance_low else ""
    return f"importance{how}: " + ", ".join(parts)

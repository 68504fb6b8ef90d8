"""How the predicted search of one model ranks its predictions by the tune's --objective
(perfkit.objectives: what each ranks a trial by), and what of them a resumed study still measures.

- throughput: the predicted figure, the request path's ceiling told apart by the instances' room
  (tuner/_search/_request_path.py headroom_first, measured_first), the best TOP_MEASURED measured
  while each could still beat the best measured;
- per-instance, per-gpu: the predicted figure over the hardware units the point's config occupies,
  counted as the trial counts them (tuner/_objective.py hardware_units, from the config the trial
  would write); the best TOP_MEASURED queued together (a rate alone cannot say which of them
  the measured rates rank first);
- pareto: the predicted front of throughput (up) and latency at the figure's load (down), the
  values the study holds for each trial (tuner/_objective.py study_values), every point of it
  (FRONT_MEASURED at most, the highest throughput first) queued together;
- a resumed study (--resume): the points already measured are not queued again; what is left is
  ranked as above (and every config is simulated: what was measured may be the best predicted).

Every config is simulated (no bound on the ones the throughput's best leave behind) for any but
throughput: their rates alone do not rank them."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import TrialState

from perfkit import objectives, predict
from perfkit.errors import PerfkitError
from perfkit.records import Calibration
from perfkit.server.modelconfig import parse_config
from perfkit.tuner import _trial_state
from perfkit.tuner._objective import hardware_units
from perfkit.tuner._search._request_path import TOP_MEASURED, measured_first

if TYPE_CHECKING:
    from perfkit.tuner._trial import TrialRunner

FRONT_MEASURED = 6  # at most this many points of a predicted front measured


def scoring_keep(t: TrialRunner, keep: int) -> int | None:
    """How many best configs scoring keeps exact (predict.score_space keep): `keep` for the
    throughput objective of a new study, None (every config simulated) otherwise."""
    return keep if t.s.objective == "throughput" and not t.s.resume else None


def units(t: TrialRunner, params: Mapping[str, Any]) -> float:
    """The hardware units a point's config occupies for a per-instance / per-GPU objective (1 for
    the others), read from the config its trial would write (infinite where none can be)."""
    if not objectives.get(t.s.objective).per_hardware:
        return 1.0
    try:
        text = t.subject.candidate(dict(params), is_original=False, number=-1).text
    except PerfkitError:  # a point whose config cannot be written: its trial is rejected, so it ranks last
        return math.inf
    return hardware_units(parse_config(text, source="a predicted point"), t.s.objective, t.space.gpus)


def rank_key(
    t: TrialRunner, params: Mapping[str, Any], by_rate: tuple[float, float], rate_rps: float
) -> tuple[float, float]:
    """A point's sort key, best first: for throughput (and pareto, whose front ranks_to_measure
    takes) `by_rate` (headroom_first's key); per hardware unit, the predicted figure over the
    point's units."""
    if objectives.get(t.s.objective).per_hardware:
        return (-rate_rps / units(t, params), 0.0)
    return by_rate


def ranked_to_measure(
    t: TrialRunner,
    cal: Calibration | None,
    ranked: list[dict[str, Any]],
    points: list[dict[str, Any]],
    result: Callable[[Mapping[str, Any]], predict.RateResult],
    *,
    done: set[Any],
) -> list[dict[str, Any]]:
    """The points the predicted search measures, best first: from the distinct ones `ranked`
    (rank_key's order) for throughput (measured_first) and per hardware unit (the first
    TOP_MEASURED); for pareto the predicted front over every point (front). Points whose config
    is in `done` (a resumed study measured it: measured_keys) are left out first."""
    ranked = [p for p in ranked if result(p).config not in done]
    points = [p for p in points if result(p).config not in done]
    obj = objectives.get(t.s.objective)
    if obj.front:
        return front(points, result)[:FRONT_MEASURED]
    if obj.per_hardware:
        return ranked[:TOP_MEASURED]
    return measured_first(cal, ranked, result)


def front(
    points: list[dict[str, Any]], result: Callable[[Mapping[str, Any]], predict.RateResult]
) -> list[dict[str, Any]]:
    """The points no other beats on both predicted throughput (up) and latency (down), one a
    config (the first point of each), the highest throughput first. Points scored to no rate
    (bounded, or nothing within the budget) are not on it."""
    seen: dict[predict.BatcherConfig, dict[str, Any]] = {}
    for p in points:
        r = result(p)
        if not r.bounded and r.rate_rps > 0 and r.config not in seen:
            seen[r.config] = p
    scored = [(p, result(p)) for p in seen.values()]

    def beaten(r: predict.RateResult) -> bool:
        return any(
            o.rate_rps >= r.rate_rps
            and o.latency_us <= r.latency_us
            and (o.rate_rps > r.rate_rps or o.latency_us < r.latency_us)
            for _, o in scored
        )

    on = [(p, r) for p, r in scored if not beaten(r)]
    return [p for p, r in sorted(on, key=lambda pr: (-pr[1].rate_rps, pr[1].latency_us))]


def queued_together(t: TrialRunner, top: list[tuple[dict[str, Any], float]]) -> int:
    """How many of the chosen points are queued at once (Predictor.queue): the best alone for
    throughput (each next one only while it could beat the best measured, by its rate); all of
    them for the other objectives, which their rates alone do not rank."""
    return 1 if t.s.objective == "throughput" else len(top)


def prediction_bounds_original(t: TrialRunner) -> bool:
    """Whether your config, predicted unable to compete with the best, is measured at its
    prediction only (Predictor.original_at_prediction): in an open loop ranked by throughput,
    where its rate alone says it cannot be the pick."""
    return t.trial_load.open_loop and t.s.objective == "throughput"


def measured_keys(study: optuna.Study, key: Callable[[Mapping[str, Any]], Any]) -> set[Any]:
    """The simulator's keys of the points a study measured already (complete or pruned trials:
    a resumed study's), which the predicted search does not queue again."""
    states = (TrialState.COMPLETE, TrialState.PRUNED)
    return {key(_trial_state.read(ft).params or ft.params) for ft in study.get_trials(deepcopy=False, states=states)}

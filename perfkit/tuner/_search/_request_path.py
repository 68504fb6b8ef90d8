"""The request path's ceiling in the predicted search: what the prediction can and cannot settle
about the configs it bounds.

Where the calibration found the request path, not the instance, holding a saturated model
(predict.host_bound), no config is predicted past the path's ceiling: the highest rate the
calibration's config held within the budget, one window a level (predict.fit_host_us). Every
config whose instances could do more is predicted at that ceiling, alike, and the simulator
cannot tell them apart. So:

- they are measured in the order of their instances' own room (headroom_first): the executions
  share the CPU with the path and stretch under its load, the more so the smaller the batch;
- each of the best predicted is measured whatever the best measured so far: its prediction cannot
  settle it; AT_CEILING_MEASURED of them, the two batch sizes with the most room each at every
  instance count (measured_first);
- a trial of one that holds more than its prediction is no error of the batcher's model: the
  path carries at least that there, in a trial's short levels (which read past what the
  confirmation's longer runs hold). Said so, it counts as holding. One that holds less is
  checked as any other (tuner/_search/_predict_check.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import optuna
from optuna.trial import TrialState

from perfkit import objectives, predict
from perfkit.records import Calibration
from perfkit.tuner import _trial_state

# A config the path bounds predicted within this of the path's ceiling is at it: the simulator's
# rate lattice (~1.1% a step) and the path's own queue put such configs 1-3% under the ceiling.
AT_CEILING = 0.95
# Configs measured where the best predicted are at the path's ceiling (measured_first), and where
# they are not (the predicted search's TOP_MEASURED): configs alike at the ceiling differ by their
# instances' room, which the prediction does not see, so more of them are measured.
AT_CEILING_MEASURED = 4
TOP_MEASURED = 3  # at most this many best predicted configs measured before the predictions are trusted


def path_ceiling_rps(cal: Calibration | None) -> float | None:
    """The request path's ceiling (req/s) a calibration sets, None where it sets none."""
    if cal is None or cal.host_us <= 0:
        return None
    return 1e6 / cal.host_us


def instances_ceiling_rps(cal: Calibration, cfg: predict.BatcherConfig) -> float:
    """What a config's instances alone could complete (predict.ceiling_rps with no path), on the
    curve of its precision / instance kind (Calibration.curve)."""
    cal = cal.curve(cfg.variant) or cal
    instances_only = dataclasses.replace(predict.service_model(cal), host_us=0.0)
    return predict.ceiling_rps(cfg, instances_only, predict.contention(cal))


def path_bound(cal: Calibration | None, cfg: object) -> bool:
    """Whether the request path, not the instances, bounds a config's predicted rate: its
    instances alone could complete more than the path's ceiling lets through. False for what is
    not one model's config (a pipeline's steps) or a calibration without a path ceiling."""
    ceiling = path_ceiling_rps(cal)
    if ceiling is None or cal is None or not isinstance(cfg, predict.BatcherConfig):
        return False
    return instances_ceiling_rps(cal, cfg) > ceiling


def at_path_ceiling(cal: Calibration | None, cfg: object, rate_rps: float | None) -> bool:
    """Whether a config is predicted at the request path's ceiling (within AT_CEILING of it,
    the path bounding it): its trial ends at that rate where it holds there (LoadHints
    at_path_ceiling), since a trial's short levels read past the path and the confirmation's
    longer runs start at the ceiling anyway."""
    ceiling = path_ceiling_rps(cal)
    if ceiling is None or rate_rps is None or rate_rps < AT_CEILING * ceiling:
        return False
    return path_bound(cal, cfg)


def headroom_first(cal: Calibration | None, cfg: predict.BatcherConfig, rate_rps: float) -> tuple[float, float]:
    """A sort key, best first: the predicted rate, where configs the path bounds predicted at its
    ceiling (AT_CEILING) count as the ceiling itself, and among them (the simulator cannot tell
    them apart) the most their instances alone could complete first. The executions share the CPU
    with the path, and stretch under its load, the more so the smaller the batch."""
    ceiling = path_ceiling_rps(cal)
    if cal is None or ceiling is None or not at_path_ceiling(cal, cfg, rate_rps):
        return (-rate_rps, 0.0)
    return (-ceiling, -instances_ceiling_rps(cal, cfg))


def alike_at_path_ceiling(cal: Calibration | None, results: list[predict.RateResult]) -> list[predict.RateResult]:
    """The space's scores with every config the path bounds that scoring left bounded (not
    simulated: its bound, the path's ceiling, was no higher than the rates kept) given the rate
    of the best simulated one at the ceiling: the simulator sees only the path there, and
    headroom_first then orders them by their instances' room. Unchanged without a path ceiling
    or a simulated config at it."""

    def at_path(r: predict.RateResult) -> bool:
        return at_path_ceiling(cal, r.config, r.rate_rps)

    like = max((r.rate_rps for r in results if not r.bounded and at_path(r)), default=None)
    if like is None:
        return results
    return [dataclasses.replace(r, rate_rps=like, bounded=False) if r.bounded and at_path(r) else r for r in results]


def measured_first(
    cal: Calibration | None, ranked: list[dict[str, Any]], result: Callable[[Mapping[str, Any]], predict.RateResult]
) -> list[dict[str, Any]]:
    """The configs the predicted search measures, best first, from distinct ones ranked best first
    (headroom_first) with their scores (`result`): the first TOP_MEASURED; or, where the best is
    at the request path's ceiling (at_path_ceiling), those at it of the two batch sizes seen first
    (the most room), each at every instance count, in rank order, AT_CEILING_MEASURED at most,
    then the rest in rank order up to TOP_MEASURED in all."""

    def cfg(params: Mapping[str, Any]) -> predict.BatcherConfig:
        return result(params).config

    def tied(params: Mapping[str, Any]) -> bool:
        return at_path_ceiling(cal, cfg(params), result(params).rate_rps)

    if not ranked or not tied(ranked[0]):
        return ranked[:TOP_MEASURED]
    sizes: list[int] = []
    for params in ranked:
        if tied(params) and cfg(params).max_batch_size not in sizes:
            sizes.append(cfg(params).max_batch_size)
    chosen = [p for p in ranked if tied(p) and cfg(p).max_batch_size in sizes[:2]][:AT_CEILING_MEASURED]
    rest = [p for p in ranked if p not in chosen]
    return chosen + rest[: max(0, TOP_MEASURED - len(chosen))]


def held_rps(study: optuna.Study, objective: str) -> float | None:
    """The highest arrival rate a measured config holds (a complete, feasible trial's load), where
    a config at the path's ceiling whose trial reads over the budget stops (LoadHints
    held_elsewhere_rps: below it, it could not beat that config); None where none holds, or for
    an objective per hardware unit (rates of configs occupying different units do not compare)."""
    if objectives.get(objective).per_hardware:
        return None
    rates = [
        st.load.value
        for ft in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if (st := _trial_state.read(ft)).feasible and st.load is not None and st.load.mode == "request_rate"
    ]
    return max(rates, default=None)

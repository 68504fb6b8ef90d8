"""The pipeline search's steps with one service curve per value of the knobs that change the
execution (precision, instance kind: a step's Calibration.values, measured by
tuner/_search/_pipeline_calibrate.py): each step's points crossed with the values it was
calibrated at, each step's config named by the value it runs at (BatcherConfig.variant) and
scored with that value's curve, as one model's are (tuner/_search/_predict_values.py). A value
the server refused holds no curve: its configs are not predicted."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from perfkit import predict
from perfkit.records import Calibration
from perfkit.tuner import _pipeline
from perfkit.tuner._search._predict_points import batcher_from, label_of, value_label
from perfkit.tuner._search._value_calibrate import space_values

StepModels = tuple[predict.ServiceModel, predict.Contention]


def step_config(s: _pipeline.Step, params: Mapping[str, Any]) -> predict.BatcherConfig:
    """The simulator's view of a step's point (its own knob names) over the step's original,
    named by the values of the PER_VALUE knobs it runs at (value_label on the step's space)."""
    cfg = batcher_from(s.space.original_params, params)
    variant = value_label(s.space, params)
    return dataclasses.replace(cfg, variant=variant) if variant else cfg


def value_points(s: _pipeline.Step, cal: Calibration, points: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each of a step's `points` at each value of its PER_VALUE knobs that its calibration `cal`
    holds a curve for (the space's values, space_values, less those the server refused), a knob
    that does not apply at a point (precision on a KIND_CPU instance) left out of it; `points` as
    they are where the calibration holds one curve for every config (measured at no value)."""
    if not cal.value:
        return [dict(p) for p in points]
    combos = [c for c in space_values(s.space, s.space.applies) if cal.curve(label_of(c)) is not None]
    dims = {d.name: d for d in s.space.dimensions}
    out: list[dict[str, Any]] = []
    seen: set[tuple[Any, ...]] = set()
    for combo in combos:
        for p in points:
            q = {**p, **combo}
            q = {k: v for k, v in q.items() if k not in combo or s.space.applies(dims[k], q)}
            key = tuple(sorted(q.items()))
            if key not in seen:
                seen.add(key)
                out.append(q)
    return out


def curve_models(cal: Calibration, variant: str) -> StepModels | None:
    """The service model and contention of a step's configs at `variant`: its curve's
    (Calibration.curve); None where the step's calibration holds no curve for that value."""
    curve = cal.curve(variant)
    if curve is None:
        return None
    return predict.service_model(curve), predict.contention(curve)


def fastest_one_us(cal: Calibration) -> float:
    """A step's execution of one request at its fastest calibrated value: the least it adds to a
    request whatever value it runs at."""
    return min(predict.service_model(c).service_us(1) for c in cal.curves())


def score_alone(
    cfgs: Sequence[predict.BatcherConfig],
    models: Callable[[str], StepModels | None],
    budget_us: float,
    *,
    percentile: float,
    requests: int,
    keep: int,
    arrival: str,
) -> list[predict.RateResult]:
    """Every config of one step alone within `budget_us`, best first (those bounded below the
    kept ones last), each value's configs with that value's curve (`models` of its variant), one
    scoring a value (its contention is its own). A config whose value holds no curve is left out."""
    groups: dict[str, list[predict.BatcherConfig]] = {}
    for c in cfgs:
        groups.setdefault(c.variant, []).append(c)
    out: list[predict.RateResult] = []
    for variant, group in groups.items():
        found = models(variant)
        if found is None:
            continue
        service, contention = found
        out += predict.score_space(group, service, budget_us, percentile=percentile, contention=contention,
                                   requests=requests, keep=keep, arrival=arrival)  # fmt: skip
    out.sort(key=lambda r: (r.bounded, -r.rate_rps))
    return out

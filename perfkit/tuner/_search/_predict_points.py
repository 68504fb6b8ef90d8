"""The points of a tune's space the batcher simulator tells apart, as its configs (perfkit.predict
BatcherConfig): what the predicted search (tuner/_search/_predict.py, tuner/_search/_predict_pipeline.py) scores."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from perfkit import predict
from perfkit.tuner._space import (
    P_COUNT,
    P_DB,
    P_DELAY,
    P_KIND,
    P_MBS,
    P_PREC,
    P_PREF,
    Dimension,
    ResolvedSpace,
    pow2_sizes,
)
from perfkit.tuner._space._knob_backend import MEASURED_PER_VALUE
from perfkit.tuner._space._knob_batching import pref_sizes
from perfkit.tuner._trial import TrialRunner


def space_points(t: TrialRunner) -> list[dict[str, Any]]:
    """Every point of the space the simulator can tell apart: max_batch_size at powers of two,
    the queue delay at 0 and log-spaced values, every preferred-size choice and instance count,
    at every value of the knobs calibrated per value (PER_VALUE: precision, instance kind, a
    backend's threads and graphs); other
    dimensions stay at the original's values."""
    base = t.original_fixed_params()
    crossed = (*SIMULATED, *PER_VALUE)
    values = {d.name: dimension_values(d) for d in t.space.dimensions if d.name in crossed}
    points: list[dict[str, Any]] = [dict(base)]
    for name, vals in values.items():
        points = [{**p, name: v} for p in points for v in vals]
    out = []
    seen = set()
    for p in points:
        p = {k: v for k, v in p.items() if t.subject.applies(next(d for d in t.space.dimensions if d.name == k), p)}
        key = tuple(sorted(p.items()))
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


SIMULATED = (P_MBS, P_DB, P_DELAY, P_PREF, P_COUNT)  # the knobs the simulator tells apart
# The knobs that change the execution itself: one model's calibration measures a service curve at
# each of their values the space holds (tuner/_search/_value_calibrate.py), and each point is
# simulated with its value's curve (BatcherConfig.variant). A backend's own threads and graphs
# (tuner/_space/_knob_backend.py) are among them: how much of an execution they speed up is the
# graph's and the machine's, which no rule predicts, so their curves are measured, never simulated.
PER_VALUE = (P_PREC, P_KIND, *MEASURED_PER_VALUE)


def value_label(space: ResolvedSpace, params: Mapping[str, Any]) -> str:
    """The values of the PER_VALUE knobs `space` searches a point is at, over the original's
    ("precision=fp16 instance_kind=gpu"; '' where the space searches none): the calibration's
    name for the curve the point runs (records Calibration.value). One model's space, or an
    ensemble's step's (`params` in its own knob names)."""
    at = {**space.original_params, **params}
    return label_of({d.name: at.get(d.name) for d in space.dimensions if d.name in PER_VALUE})


def label_of(values: Mapping[str, Any]) -> str:
    """The name of the curve at PER_VALUE knobs' `values` ("precision=fp16 instance_kind=gpu")."""
    return " ".join(f"{n}={values[n]}" for n in PER_VALUE if n in values)


def dimension_values(d: Dimension) -> list[Any]:
    """The values of a dimension the prediction scores: a range's 8 log-spaced points (a batch
    size's powers of two), a choice's every choice."""
    if not d.is_range:
        return list(d.choices)
    assert d.low is not None and d.high is not None
    lo, hi = max(1, d.low), d.high
    if d.name == P_MBS:
        return sorted({v for v in pow2_sizes(hi) if v >= lo} | {lo, hi})
    n = 8
    return sorted({int(round(lo * (hi / lo) ** (i / (n - 1)))) for i in range(n)}) if hi > lo else [lo]


def batcher_config(t: TrialRunner, params: Mapping[str, Any]) -> predict.BatcherConfig:
    """The simulator's view of a point: its batching and instance parameters over the original's,
    and the value of the knobs calibrated per value it runs at (value_label)."""
    cfg = batcher_from(t.space.original_params, params)
    variant = value_label(t.space, params)
    return dataclasses.replace(cfg, variant=variant) if variant else cfg


def batcher_from(orig: Mapping[str, Any], params: Mapping[str, Any]) -> predict.BatcherConfig:
    """The simulator's view of `params` (one model's knob names) over the original's `orig`."""
    mbs = int(params.get(P_MBS, orig.get(P_MBS) or 0))
    db = bool(params.get(P_DB, orig.get(P_DB, False))) and mbs > 0
    pref = tuple(pref_sizes(params.get(P_PREF), mbs, list(orig.get("preferred_sizes", []) or []))) if db else ()
    delay = float(params.get(P_DELAY, 0) or 0) if db else 0.0
    count = int(params.get(P_COUNT, orig.get(P_COUNT) or 1))
    return predict.BatcherConfig(mbs, db, tuple(s for s in pref if s <= mbs), delay, max(1, count))

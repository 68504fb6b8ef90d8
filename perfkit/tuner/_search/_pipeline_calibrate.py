"""The calibration of a pipeline for the predicted search (tuner/_search/_predict_pipeline.py): every step
of an ensemble measured in one run through it.

Why calibrate through the ensemble rather than step by step: one run gives every step's
per-batch-size statistics at once (N closed-loop clients answered together reach each step as one
batch, since Triton forwards a step's outputs as soon as they are ready), so the batch-size part
costs the same for three steps as for one, and the overhead measured is the pipeline's own
(client, protocol and the ensemble's forwarding). Contention is the exception: a step's saturated
rate at two instance counts must be the step's, so each step with two instance counts in the
space is loaded directly. The budget: (1 + log2 of the largest max_batch_size) levels through the
ensemble, plus 2 levels per step with two instance counts, each CALIBRATION_LEVEL_S (plus its
warm-up) and one reload per config change.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from perfkit import predict
from perfkit.errors import PerfkitError
from perfkit.records import Calibration, CalibrationPoint, LevelResult
from perfkit.tuner import _pipeline
from perfkit.tuner._events import TuneEvent
from perfkit.tuner._search._model_calibrate import (
    CALIBRATION_DELAY_US,
    CONTENTION_CLIENTS_PER_INSTANCE,
    _level,
    _spec,
    check_predictable,
)
from perfkit.tuner._search._predict_points import dimension_values
from perfkit.tuner._search._value_calibrate import ValueLevels, calibrate_values, space_values, value_phrase
from perfkit.tuner._space import P_COUNT, P_DB, P_DELAY, P_MBS, P_PREF, pow2_sizes
from perfkit.tuner._subject_pipeline import step_rows
from perfkit.tuner._trial import TrialRunner

SEP = _pipeline.SEP


@dataclass(frozen=True)
class PipelineCalibrated(TuneEvent):
    """Each step's fitted service model and the pipeline's overhead."""

    cal: Calibration
    levels: int

    def line(self) -> str:
        c = self.cal
        rows = []
        for s in c.steps:
            sizes = ", ".join(f"{p.batch_size}:{p.service_us / 1e3:.2f}ms" for p in s.points)
            shared = f", shared fraction {s.shared_fraction:.2f}" if s.instance_counts else ""
            at = f" at {s.value}" if s.values else ""
            rows.append(
                f"  {s.model}{at}: {s.fixed_us / 1e3:.2f} ms + {s.per_item_us / 1e3:.3f} ms per item (fit error"
                f" {s.fit_rms_rel:.1%} rms, {s.fit_max_rel:.1%} worst; batch:ms {sizes}){shared}"
            )
            rows += [f"    {v.value}: {value_phrase(v)}" for v in s.values]
        return (
            f"calibrated {len(c.steps)} steps in {c.duration_s:.0f} s ({self.levels} levels), overhead outside the"
            f" steps {c.overhead_us / 1e3:.2f} ms:\n" + "\n".join(rows)
        )


# Per step loaded on its own: its instance counts, saturated rates there, and the batches one instance ran.
Contended = dict[str, tuple[list[int], list[float], tuple[CalibrationPoint, ...]]]


def step_contention(t: TrialRunner, point: dict[str, Any], counted: dict[str, list[int]]) -> tuple[Contended, int]:
    """Each step of `counted` loaded on its own at its two instance counts (batching off,
    CONTENTION_CLIENTS_PER_INSTANCE clients an instance), the rest of the pipeline at `point`:
    its saturated rates, and the batches it ran at one instance; and the levels run."""
    subject = t.subject
    out: Contended = {}
    levels = 0
    for m, counts in counted.items():
        rates: list[float] = []
        loaded: tuple[CalibrationPoint, ...] = ()
        for c in counts:
            solo = {**point, f"{m}{SEP}{P_COUNT}": c}
            if f"{m}{SEP}{P_DB}" in solo:
                solo[f"{m}{SEP}{P_DB}"] = False
            t.put_candidate(subject.candidate(solo, is_original=False, number=-1).text)
            first = t.server.model_stats(m)
            spec = dataclasses.replace(_spec(t, CONTENTION_CLIENTS_PER_INSTANCE * c), model=m)
            rates.append(_level(t, spec).throughput_infer_per_s)
            levels += 1
            if c == 1:
                loaded = predict.batch_points(first, t.server.model_stats(m), m)
        out[m] = (counts, rates, loaded)
    return out, levels


def batching_point(
    t: TrialRunner, steps: Sequence[_pipeline.Step]
) -> tuple[dict[str, Any], dict[str, int], dict[str, list[int]]]:
    """The original's point with each of `steps` at one instance (its smallest count) and, where its
    space batches, at its largest max_batch_size with dynamic batching and a wide queue delay;
    each step's batch sizes to form (its largest max_batch_size where it batches, else 0); and its
    two smallest instance counts where the space holds two."""
    point = dict(t.original_fixed_params())
    tops: dict[str, int] = {}
    counted: dict[str, list[int]] = {}
    for s in steps:
        dims = {d.name: d for d in s.space.dimensions}
        sizes = dimension_values(dims[P_MBS]) if P_MBS in dims else []
        mbs = max([int(s.space.original_params.get(P_MBS) or 0), *sizes])
        tops[s.model] = mbs
        if P_COUNT in dims:
            choices = sorted(int(c) for c in dimension_values(dims[P_COUNT]))
            point[f"{s.model}{SEP}{P_COUNT}"] = choices[0]
            if len(choices) >= 2:
                counted[s.model] = choices[:2]
        if mbs > 1 and (P_DB not in dims or True in dims[P_DB].choices):
            for knob, value in ((P_MBS, mbs), (P_DB, True), (P_DELAY, CALIBRATION_DELAY_US), (P_PREF, "none")):
                if knob in dims:
                    point[f"{s.model}{SEP}{knob}"] = value
    return point, tops, counted


@contextmanager
def calibrating(t: TrialRunner) -> Iterator[None]:
    """The subject's configs guarded while calibration loads its candidates: the originals served
    again after (what the subject knows it serves), the files put back by the route's guard."""
    subject = t.subject
    with subject.route.guard(t.server, subject.paths, reload_last=subject.reload_last):
        try:
            yield
        finally:
            try:
                subject.restore(t.server)
            except PerfkitError:
                pass  # the guard puts the files back and reports what it could not


def step_calibration(model: str, points: Any, contention: Contended) -> Calibration:
    """One step's calibration from its points and, where measured, its saturated rates by instance count."""
    counts, rates, _ = contention.get(model, ([], [], ()))
    return predict.calibration(
        model, points, instance_counts=tuple(counts) if rates else (), saturated_rps=tuple(rates)
    )


def step_values(
    t: TrialRunner,
    step: _pipeline.Step,
    first: Calibration,
    point: dict[str, Any],
    top: int,
    counts: list[int],
    *,
    on_step: bool = False,
) -> tuple[Calibration, int]:
    """A step's calibration (`first`, at the original's values) with a curve at each other value
    of the PER_VALUE knobs its space holds (calibrate_values, its knobs "<step>.<knob>" at
    `point`): its batch sizes up to `top` formed as the first value's were, by closed-loop clients
    of the ensemble (the steps before it hand it their batches whole), or with `on_step` of the
    step itself (a model a BLS model calls, which sees one call at a time from it), its saturated rates at
    `counts` (its two instance counts, none where its contention was not measured) on the step
    alone, as step_contention reads them; and the levels run. Unchanged where the space holds one
    value. Must run inside `calibrating`. Raises what measuring raises."""
    combos = space_values(step.space, step.space.applies)
    if len(combos) < 2:
        return first, 0
    m = step.model
    ran: list[int] = []

    def closed(n: int) -> LevelResult:
        ran.append(n)
        spec = _spec(t, n)
        return _level(t, dataclasses.replace(spec, model=m) if on_step else spec)

    def saturate(n: int) -> LevelResult:
        ran.append(n)
        return _level(t, dataclasses.replace(_spec(t, n), model=m))

    cal = calibrate_values(
        t, first, batch=point, sizes=[1, *pow2_sizes(top)] if top > 1 else [1], counts=counts,
        levels=ValueLevels(closed, saturate, m, prefix=f"{m}{SEP}"),
        clients_per_instance=CONTENTION_CLIENTS_PER_INSTANCE, combos=combos,
    )  # fmt: skip
    return cal, len(ran)


def whole_calibration(model: str, steps: list[Calibration], overhead_us: float, started: float) -> Calibration:
    """A pipeline's calibration: its steps', the overhead outside them, the fit's worst step (over
    every value's curve of a step calibrated per value)."""
    curves = [c for s in steps for c in s.curves()]
    return Calibration(
        model=model,
        points=(),
        fixed_us=0.0,
        per_item_us=0.0,
        fit_rms_rel=max(c.fit_rms_rel for c in curves),
        fit_max_rel=max(c.fit_max_rel for c in curves),
        overhead_us=overhead_us,
        duration_s=time.monotonic() - started,
        steps=tuple(steps),
    )


def calibrate_pipeline(t: TrialRunner) -> Calibration:
    """Every step of an ensemble measured in one run through it: each searched step at its largest
    max_batch_size, dynamic batching with a wide queue delay and one instance, while 1, 2, 4, ...
    closed-loop clients (up to the largest max_batch_size) load the ensemble; each step's
    execution time per batch size read from its own per-batch-size statistics; the overhead
    outside every step from one client; a step's saturated rates at its two smallest instance
    counts measured on the step itself; then each step at each other precision / instance kind
    of its space (step_values). Every step's config is put back after. Raises UsageError
    for a load the prediction does not model, MeasurementError when a step executed nothing, and
    what measuring raises."""
    check_predictable(t.trial_load)
    subject = t.subject
    p = subject.pipeline
    assert p is not None  # an ensemble's subject holds its pipeline
    started = time.monotonic()
    point, tops, counted = batching_point(t, p.searched_steps)
    top = max(tops.values(), default=0)
    names = [s.model for s in p.steps]
    levels = 0
    steps: list[Calibration] = []
    with calibrating(t):
        t.put_candidate(subject.candidate(point, is_original=False, number=-1).text)
        before = {m: t.server.model_stats(m) for m in names}
        light = _level(t, _spec(t, 1))
        for n in pow2_sizes(top) if top > 1 else []:
            _level(t, _spec(t, n))
        after = {m: t.server.model_stats(m) for m in names}
        levels = 1 + (len(pow2_sizes(top)) if top > 1 else 0)
        contention, more = step_contention(t, point, counted)
        levels += more
        for m in names:
            loaded = contention.get(m, ([], [], ()))[2]
            points = predict.merge_points(predict.batch_points(before[m], after[m], m), loaded)
            cal = step_calibration(m, points, contention)
            if p.step(m).searched:  # each other precision / instance kind of its space, the rest at `point`
                cal, more = step_values(t, p.step(m), cal, point, tops.get(m, 0), counted.get(m, []))
                levels += more
            steps.append(cal)
    inside = sum(q + c for _, q, c, _ in step_rows(light, names))
    overhead = max(0.0, light.service.mean_us - inside) if inside > 0 else 0.0
    cal = whole_calibration(p.model, steps, overhead, started)
    t.emit(PipelineCalibrated(cal, levels))
    return cal

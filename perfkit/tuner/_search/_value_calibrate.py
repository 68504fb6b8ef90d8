"""One model's calibration at each value of the knobs that change the execution itself
(precision, instance kind: tuner/_search/_predict_points.py PER_VALUE), for the predicted search;
an ensemble's step's the same way, its levels run through the ensemble, and a BLS model's called
model's, its levels run on the model itself (tuner/_search/_pipeline_calibrate.py step_values).

The model's calibration (tuner/_search/_model_calibrate.py) measures its service curve at the
original's value. Each other value the space holds is then put on the server through the same
config path the trials use (the calibration's batching config at that value; the original is put
back after the whole calibration) and measured:

- first the smallest and the largest batch size the calibration formed. Where the two execution
  times stand to the first value's at those sizes in the same ratio (within FACTOR_TOLERANCE),
  the value's curve is the first's times that factor, and nothing more is measured: two lines
  whose ratio is the same at both ends hold that ratio at every size between (a ratio of two
  lines is monotone in the batch size), and a precision that speeds every kernel alike (a
  TensorRT engine built at fp16, an accelerator's precision mode) is that case;
- otherwise (a part of the execution the value does not change: the host's share of it) the
  other batch sizes, and the saturated rates at the two instance counts the first value's
  contention was fitted from: the value's own line and contention, as the first value's were.

Each value spends at most VALUE_LEVELS calibration levels. The overhead outside the instance and
the request path's ceiling are the first value's: neither runs on the instance. A value whose
config the server refuses is said and left out: its configs are not predicted."""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfkit import predict
from perfkit.errors import CandidateNotAppliedError, ModelLoadError
from perfkit.records import Calibration, CalibrationPoint, LevelResult
from perfkit.tuner._events import TuneEvent
from perfkit.tuner._search._predict_points import PER_VALUE, label_of
from perfkit.tuner._space import P_COUNT, P_DB, Dimension, ResolvedSpace
from perfkit.tuner._trial import TrialRunner

# The two ends' ratios to the first value's agreeing within this, the value's curve is the first's
# times their mean: off the value's own line by at most this at any size between, half the
# prediction's tolerance (tuner/_search/_predict_check.py PREDICTION_TOLERANCE), so the curve's
# error leaves the simulator room. A stricter figure costs only the few levels of the full curve.
FACTOR_TOLERANCE = 0.05
# The most calibration levels (one window of CALIBRATION_LEVEL_S each) one value spends: the
# factor's two, or every batch size the first value measured and its two saturated instance
# counts. Ten batch sizes (powers of two to 512) and two counts fit; a wider space's sizes
# between the ends are thinned to fit, so that a space of two precisions on two instance kinds
# adds well under a minute of calibration per value on the trials' windows.
VALUE_LEVELS = 12


@dataclass(frozen=True)
class ValueFigures:
    """What one value's calibration measured: its points, and where not a factor of the first
    value's, its saturated rates at the instance counts."""

    points: tuple[CalibrationPoint, ...]
    saturated_rps: tuple[float, ...] = ()


def space_values(space: ResolvedSpace, applies: Callable[[Dimension, Mapping[str, Any]], bool]) -> list[dict[str, Any]]:
    """Each distinct combination of the PER_VALUE knobs' values `space` holds (one model's space,
    or an ensemble's step's: its own knob names), the original's first (none where the space
    searches none of them); `applies` says whether a dimension applies at a point (the subject's,
    or the step's space's own)."""
    dims = [d for d in space.dimensions if d.name in PER_VALUE and not d.is_range]
    if not dims:
        return []
    orig = space.original_params
    first = {d.name: orig.get(d.name) for d in dims}
    out = [first]
    for vals in itertools.product(*(d.choices for d in dims)):
        combo = dict(zip([d.name for d in dims], vals, strict=True))
        # a knob that does not apply at the others' values (precision on a KIND_CPU instance) stays the original's
        combo = {d.name: combo[d.name] if applies(d, {**orig, **combo}) else first[d.name] for d in dims}
        if combo not in out:
            out.append(combo)
    return out


def factor_of(first: Sequence[CalibrationPoint], points: Sequence[CalibrationPoint]) -> float | None:
    """The factor f such that the value's executions (points) are the first value's (first) times
    f: the execution-weighted mean of their ratios at the batch sizes both measured, where those
    ratios agree within FACTOR_TOLERANCE (the largest over the smallest); None where they do not,
    or fewer than two batch sizes compare (one size tells no shape)."""
    by_size = {p.batch_size: p.service_us for p in first if p.service_us > 0}
    ratios = [(p.service_us / by_size[p.batch_size], p.executions) for p in points if p.batch_size in by_size]
    if len(ratios) < 2 or min(r for r, _ in ratios) <= 0:
        return None
    lo, hi = min(r for r, _ in ratios), max(r for r, _ in ratios)
    if hi / lo - 1 > FACTOR_TOLERANCE:
        return None
    return sum(r * n for r, n in ratios) / sum(n for _, n in ratios)


def confirm_sizes(sizes: Sequence[int]) -> list[int]:
    """The batch sizes a value is measured at first: the smallest and the largest."""
    ordered = sorted(set(sizes))
    return ordered[:1] + ordered[-1:] if len(ordered) > 1 else ordered


def rest_sizes(sizes: Sequence[int], counts: Sequence[int]) -> list[int]:
    """The batch sizes between the ends a value's full curve measures too, thinned (evenly, by
    rank) so that the ends, these and the instance counts' levels fit VALUE_LEVELS."""
    ordered = sorted(set(sizes))
    middle = ordered[1:-1]
    room = max(0, VALUE_LEVELS - len(confirm_sizes(ordered)) - len(counts))
    if len(middle) <= room:
        return middle
    if room == 0:
        return []
    step = len(middle) / room
    return sorted({middle[int(i * step)] for i in range(room)})


def value_curve(first: Calibration, value: str, figures: ValueFigures, *, duration_s: float) -> Calibration:
    """A value's calibration from what was measured at it: the first value's curve times the
    factor where factor_of finds one (its contention the first's: a factor on the whole
    execution leaves its shared part's share as it was), else its own line through its points and
    its contention from its saturated rates at the first value's instance counts (the first's
    where none were measured); the overhead and the request path's figures are the first value's.
    Raises MeasurementError as predict.calibration does."""
    points = figures.points
    factor = factor_of(first.points, points) if not figures.saturated_rps else None
    if factor is not None:
        a, b = first.fixed_us * factor, first.per_item_us * factor
        rel = [(a + b * p.batch_size) / p.service_us - 1 for p in points if p.service_us > 0]
        worst = max((abs(r) for r in rel), default=0.0)
        rms = (sum(r * r for r in rel) / len(rel)) ** 0.5 if rel else 0.0
        return dataclasses.replace(
            first, value=value, values=(), points=tuple(points), fixed_us=a, per_item_us=b,
            fit_rms_rel=max(first.fit_rms_rel, rms), fit_max_rel=max(first.fit_max_rel, worst),
            instance_counts=(), saturated_rps=(), factor=factor, duration_s=duration_s,
        )  # fmt: skip
    rates = figures.saturated_rps
    counts = first.instance_counts if len(rates) == len(first.instance_counts) else ()
    own = predict.calibration(first.model, points, instance_counts=counts, saturated_rps=rates if counts else ())
    return dataclasses.replace(
        first, value=value, values=(), points=own.points, fixed_us=own.fixed_us, per_item_us=own.per_item_us,
        fit_rms_rel=own.fit_rms_rel, fit_max_rel=own.fit_max_rel, instance_counts=own.instance_counts,
        saturated_rps=own.saturated_rps, shared_fraction=own.shared_fraction if counts else first.shared_fraction,
        factor=0.0, duration_s=duration_s,
    )  # fmt: skip


@dataclass(frozen=True)
class ValueLevels:
    """How calibrate_values measures: `closed(n)`, one calibration level of n closed-loop clients
    through what the calibration loads (its batch sizes formed); `saturate(n)`, n clients on the
    model alone (its saturated rate at an instance count); `model`, whose per-batch-size statistics
    are read; `prefix`, the model's knob names in the subject's params ('' for one model, "<step>."
    for an ensemble's step: tuner/_search/_pipeline_calibrate.py)."""

    closed: Callable[[int], LevelResult]
    saturate: Callable[[int], LevelResult]
    model: str
    prefix: str = ""


def calibrate_values(
    t: TrialRunner,
    first: Calibration,
    *,
    batch: Mapping[str, Any],
    sizes: Sequence[int],
    counts: Sequence[int],
    levels: ValueLevels,
    clients_per_instance: int,
    combos: Sequence[Mapping[str, Any]] | None = None,
) -> Calibration:
    """The first value's calibration (`first`, measured at the original's values on `batch`, the
    subject's params its batch sizes were formed on) with a curve for each other value in
    `combos` (the PER_VALUE knobs' values, the first value's first; default: the space's,
    space_values), each measured on `batch` at that value as the module says: the ends of
    `sizes`, then where no factor holds the rest of them and the saturated rates at `counts`
    (unbatched, `clients_per_instance` clients each, as the first value's were), by `levels`.
    Unchanged where there is no other value. Must run where the caller puts the original back
    (the calibration's route guard). Raises what measuring raises."""
    combos = list(space_values(t.space, t.subject.applies) if combos is None else combos)
    if len(combos) < 2:
        return first
    curves = []
    for combo in combos[1:]:
        label = label_of(combo)
        started = time.monotonic()
        cfg = {**batch, **{f"{levels.prefix}{k}": v for k, v in combo.items()}}
        try:
            figures = _measure_value(t, first, cfg, sizes, counts, levels, clients_per_instance)
        except (ModelLoadError, CandidateNotAppliedError) as err:
            why = str(err).splitlines()[0] if str(err) else type(err).__name__
            t.emit(ValueSkipped(label, why, step=levels.model if levels.prefix else ""))
            continue
        curves.append(value_curve(first, label, figures, duration_s=time.monotonic() - started))
    return dataclasses.replace(first, value=label_of(combos[0]), values=tuple(curves))


def _measure_value(
    t: TrialRunner,
    first: Calibration,
    cfg: Mapping[str, Any],
    sizes: Sequence[int],
    counts: Sequence[int],
    levels: ValueLevels,
    clients_per_instance: int,
) -> ValueFigures:
    """The levels of one value (see calibrate_values): the ends, and where they are no factor of
    the first value's, the sizes between and the saturated rates at two instance counts."""
    subject, m, pre = t.subject, levels.model, levels.prefix
    t.put_candidate(subject.candidate(dict(cfg), is_original=False, number=-1).text)
    before = t.server.model_stats(m)
    for n in confirm_sizes(sizes):
        levels.closed(n)
    ends = predict.batch_points(before, t.server.model_stats(m), m)
    if factor_of(first.points, ends) is not None:
        return ValueFigures(ends)
    mid = t.server.model_stats(m)
    for n in rest_sizes(sizes, counts if len(counts) == 2 else ()):
        levels.closed(n)
    points = predict.merge_points(ends, predict.batch_points(mid, t.server.model_stats(m), m))
    rates: list[float] = []
    for c in counts if len(counts) == 2 else ():
        solo = {**cfg, f"{pre}{P_COUNT}": c}
        if cfg.get(f"{pre}{P_DB}"):
            solo[f"{pre}{P_DB}"] = False
        t.put_candidate(subject.candidate(solo, is_original=False, number=-1).text)
        rates.append(levels.saturate(clients_per_instance * c).throughput_infer_per_s)
    return ValueFigures(points, tuple(rates))


@dataclass(frozen=True)
class ValueSkipped(TuneEvent):
    """A value the server would not load: its configs are not predicted (`step`: the ensemble's
    step it was measured on; '' for one model)."""

    value: str
    why: str
    step: str = ""

    def line(self) -> str:
        at = f"{self.step} at " if self.step else ""
        return (
            f"calibration: {at}{self.value} not calibrated (the server refused it: {self.why}): its configs are"
            " not predicted"
        )


def value_phrase(c: Calibration) -> str:
    """One value's curve, for the calibration's line: its factor over the first value's where the
    shortcut held, else its own line and contention."""
    sizes = ", ".join(f"{p.batch_size}:{p.service_us / 1e3:.2f}ms" for p in c.points)
    if c.factor > 0:
        return (
            f"x{c.factor:.2f} the first curve, confirmed at batch:ms {sizes} (within {FACTOR_TOLERANCE:.0%});"
            f" {c.duration_s:.0f} s"
        )
    shared = f"; shared fraction {c.shared_fraction:.2f}" if c.instance_counts else ""
    return (
        f"execution {c.fixed_us / 1e3:.2f} ms + {c.per_item_us / 1e3:.3f} ms per item (fit error {c.fit_rms_rel:.1%}"
        f" rms, {c.fit_max_rel:.1%} worst; batch:ms {sizes}){shared}; {c.duration_s:.0f} s"
    )

"""Fitting the simulator's inputs from what Triton reports: execution time per batch size from
the per-batch-size statistics of /v2/models/M/stats (batch_stats), the per-request overhead
outside the instance, the instances' contention from saturated rates at two counts, and the
request path's ceiling from the rate held within the budget by a config whose instance is not
busy all the time when saturated. Pure
functions of the figures; measuring them is the caller's (the tuner's predicted search)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from perfkit.errors import MeasurementError
from perfkit.predict._model import Contention, ServiceModel
from perfkit.records import Calibration, CalibrationPoint

_PHASES = ("compute_input", "compute_infer", "compute_output")


def _batch_totals(stats: Mapping[str, Any], model: str) -> dict[int, tuple[int, int]]:
    """{batch size: (executions, ns of input + infer + output)} of one model, versions summed."""
    out: dict[int, tuple[int, int]] = {}
    for entry in stats.get("model_stats", []) or []:
        if entry.get("name") != model:
            continue
        for b in entry.get("batch_stats", []) or []:
            size = int(b.get("batch_size", 0))
            count = int(b.get("compute_infer", {}).get("count", 0))
            ns = sum(int(b.get(phase, {}).get("ns", 0)) for phase in _PHASES)
            c0, n0 = out.get(size, (0, 0))
            out[size] = (c0 + count, n0 + ns)
    return out


def batch_points(before: Mapping[str, Any], after: Mapping[str, Any], model: str) -> tuple[CalibrationPoint, ...]:
    """The batch sizes executed between two /v2/models/M/stats answers, with each one's count
    and mean execution time (compute_input + compute_infer + compute_output), by size."""
    b, a = _batch_totals(before, model), _batch_totals(after, model)
    points = []
    for size, (count, ns) in sorted(a.items()):
        c0, n0 = b.get(size, (0, 0))
        if count - c0 > 0 and size > 0:
            points.append(CalibrationPoint(size, count - c0, (ns - n0) / 1e3 / (count - c0)))
    return tuple(points)


def merge_points(*runs: Sequence[CalibrationPoint]) -> tuple[CalibrationPoint, ...]:
    """Points of several runs as one set: per batch size, executions summed and their times
    averaged, weighted by executions."""
    total: dict[int, tuple[int, float]] = {}
    for run in runs:
        for p in run:
            n, us = total.get(p.batch_size, (0, 0.0))
            total[p.batch_size] = (n + p.executions, us + p.service_us * p.executions)
    return tuple(CalibrationPoint(size, n, us / n) for size, (n, us) in sorted(total.items()) if n > 0)


# A batch size whose mean execution is off the fitted line by more than this (and by more than
# OUTLIER_TYPICAL times the median miss) is a stall of the shared machine, not the model's curve.
OUTLIER_REL = 0.25
OUTLIER_TYPICAL = 3.0


def _line(n: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """a + b*n through the points by execution-weighted least squares, each term clamped at 0."""
    if len(set(n.tolist())) < 2:
        return float(np.average(y, weights=w)), 0.0
    sw = np.sqrt(w)
    a, b = (float(v) for v in np.linalg.lstsq(np.column_stack([sw, sw * n]), sw * y, rcond=None)[0])
    if b < 0:
        return float(np.average(y, weights=w)), 0.0
    if a < 0:
        return 0.0, float(np.sum(w * n * y) / np.sum(w * n * n))
    return a, b


def fit_service(points: Sequence[CalibrationPoint]) -> tuple[float, float, float, float]:
    """(fixed_us, per_item_us, rms_rel, max_rel): the line a + b*n through the points, weighted by
    their executions, and how far off the points it is (relative residuals: execution-weighted
    RMS and worst, over every point). One batch size fits a constant (per_item 0). Raises
    MeasurementError with no points. A negative fitted term is clamped to 0 and the other refitted.
    With three sizes or more, sizes off the first line by more than OUTLIER_REL and OUTLIER_TYPICAL
    times the median miss (an execution stalled by the machine, seen at load average 6-10 on 2
    cores: a batch of 21 at 134 ms between batches of 20 and 25 at 42 and 40 ms) are left out of
    a second fit, when two sizes or more remain; the stated error still counts them."""
    if not points:
        raise MeasurementError(
            "calibration: the server executed no batch in the calibration run",
            hint="check that the model answers requests and that the run was long enough",
        )
    n = np.array([p.batch_size for p in points], dtype=float)
    y = np.array([p.service_us for p in points], dtype=float)
    w = np.array([p.executions for p in points], dtype=float)
    a, b = _line(n, y, w)
    rel = (a + b * n - y) / y
    if len(set(n.tolist())) > 2:
        keep = np.abs(rel) <= max(OUTLIER_REL, OUTLIER_TYPICAL * float(np.median(np.abs(rel))))
        if not keep.all() and len(set(n[keep].tolist())) >= 2:
            a, b = _line(n[keep], y[keep], w[keep])
            rel = (a + b * n - y) / y
    return a, b, float(np.sqrt(np.average(rel**2, weights=w))), float(np.max(np.abs(rel)))


def fit_shared_fraction(counts: Sequence[int], rates_rps: Sequence[float]) -> float:
    """The shared fraction f of Contention from saturated rates at two instance counts: the rate
    scales by min(c, 1/f), so a ratio R of the larger count's rate over the smaller's gives
    f = 1/(R * c_small) when R is short of the count ratio, 0 when the instances scale fully
    (within 5%). Raises MeasurementError for fewer than two counts or a rate that is not positive."""
    if len(counts) < 2 or len(rates_rps) != len(counts) or min(rates_rps) <= 0:
        raise MeasurementError(
            f"calibration: contention needs positive saturated rates at two instance counts, got {list(rates_rps)}"
            f" at {list(counts)}",
            hint="check that the model answers at each instance count",
        )
    pairs = sorted(zip(counts, rates_rps, strict=True))
    (c1, r1), (c2, r2) = pairs[0], pairs[-1]
    scale = (r2 / r1) * c1  # what c2 instances deliver, counted in single instances
    if scale >= 0.95 * c2:
        return 0.0
    return float(min(1.0, max(1.0 / c2, 1.0 / max(scale, 1e-9))))


# Saturated with its instance busy less than this, a model is held back by its requests' path,
# not by its instance: the rate there is that path's ceiling. A model whose executions share the
# CPU with the request handling and the load generator reads its instance well under fully busy
# there, and by a margin that moves from one calibration to the next; one on a device of its own
# reads it fully busy. Taking the path for the bound where the instance held costs little (the
# configs it bounds are measured by their instances' room first, and holding past the path's
# ceiling is no error); the reverse predicts configs at twice what they hold, and the search
# falls back to measuring. Not higher: under a loaded CI machine an unbatched instance's gaps
# between executions read as idle: one unbatched instance saturated in closed loop (no batching to
# overload) is judged by UNBATCHED_HOST_BOUND_BUSY instead.
HOST_BOUND_BUSY = 0.92
UNBATCHED_HOST_BOUND_BUSY = 0.85


def instance_busy(
    saturated_rps: float, points: Sequence[CalibrationPoint], service_us: Callable[[int], float] | None = None
) -> float:
    """How much of the time one instance would execute at a saturated rate (items/s) the batches
    executed at it (its points): rate x execution time per item, each batch timed by
    service_us (the fitted line, measured unloaded) or, without it, as the points read. The
    unloaded time is the one that tells: where the instances share the machine's CPU with the
    requests' own handling, an execution under that load stretches and reads busy while the
    handling, not the execution, is what holds the rate. 0 with no points or no rate."""
    items = sum(p.executions * p.batch_size for p in points)
    if saturated_rps <= 0 or items <= 0:
        return 0.0
    busy_us = sum(p.executions * (service_us(p.batch_size) if service_us else p.service_us) for p in points)
    return saturated_rps * busy_us / items / 1e6


# Two instances of the overloaded batching config delivering less than this share of what the
# instances' own contention gives (fitted from unbatched saturated rates) were held by something
# they do not share that way: the request path.
SCALING_SHORT = 0.8


def host_bound(
    busy: float, scaled: float | None = None, expected: float | None = None, *, unbatched: bool = False
) -> bool:
    """Whether a config saturated with its instances busy `busy` of the time was held by the
    request path, not by its instances: busy < HOST_BOUND_BUSY (UNBATCHED_HOST_BOUND_BUSY where
    the saturated level was one unbatched instance in closed loop), or with more instances it
    delivered `scaled` times its rate where their contention gives `expected` times and scaled <
    SCALING_SHORT x expected (an instance can read busy by a line its loaded calibration levels
    stretched, while more instances deliver no more than one: the path, not the instances, held
    the rate)."""
    if busy < (UNBATCHED_HOST_BOUND_BUSY if unbatched else HOST_BOUND_BUSY):
        return True
    return scaled is not None and expected is not None and scaled < SCALING_SHORT * expected


def scaling(
    counts: Sequence[int], shared_fraction: float, saturated_rps: float, scaled_rps: float
) -> tuple[float, float] | None:
    """(what the larger instance count delivered over the smaller, overloaded with batching; what
    their contention gives), None where not measured."""
    if len(counts) < 2 or saturated_rps <= 0 or scaled_rps <= 0:
        return None
    lo, hi = min(counts), max(counts)
    c = Contention(shared_fraction)
    return scaled_rps / saturated_rps, c.instance_scaling(hi) / c.instance_scaling(lo)


def execution_stretch(points: Sequence[CalibrationPoint], service_us: Callable[[int], float]) -> float:
    """How much longer the executions of a loaded level took than the unloaded line says
    (service_us), over their total time: at least 1 (1 with no points). An execution sharing the
    CPU with the requests' handling and the load generator stretches under their load; one on a
    device of its own does not."""
    unloaded = sum(p.executions * service_us(p.batch_size) for p in points)
    loaded = sum(p.executions * p.service_us for p in points)
    return max(1.0, loaded / unloaded) if unloaded > 0 else 1.0


def fit_host_us(saturated_rps: float, path_holds: bool, held_rps: float = 0.0) -> float:
    """The request path's ceiling (ServiceModel.host_us) from a saturated config: where the path,
    not the instances, held its rate (path_holds, see host_bound), 1 / the highest rate the same
    config held within the tune's budget (held_rps, measured below the saturated rate: on a
    machine whose CPUs the path shares with the executions and the load generator, its latency
    runs past a budget long before it saturates), or without one 1 / the saturated rate; else 0
    (the instances held it: the path's ceiling is past what was seen)."""
    if saturated_rps <= 0 or not path_holds:
        return 0.0
    return 1e6 / (held_rps if 0 < held_rps < saturated_rps else saturated_rps)


def calibration(
    model: str,
    points: Sequence[CalibrationPoint],
    *,
    overhead_us: float = 0.0,
    instance_counts: Sequence[int] = (),
    saturated_rps: Sequence[float] = (),
    duration_s: float = 0.0,
    host_saturated_rps: float = 0.0,
    host_points: Sequence[CalibrationPoint] = (),
    host_held_rps: float = 0.0,
    host_scaled_rps: float = 0.0,
    host_unbatched: bool = False,
) -> Calibration:
    """A Calibration from the measured points, overhead and (optionally) saturated rates at two
    instance counts, and the request path's ceiling from the saturated rate of one instance
    (host_saturated_rps, items/s) with the batches executed at it (host_points), and the highest
    rate it held within the budget (host_held_rps, 0 if not measured; see fit_host_us), and the
    same config's saturated rate at the larger instance count (host_scaled_rps; see host_bound).
    host_unbatched: the saturated level was one unbatched instance in closed loop (a model without
    batching), not the trials' open-loop overload of batches: its instance is judged by the
    unbatched threshold, and its executions' stretch is not simulated (a closed loop's few
    clients do not load the path as the trials' rates do, so a stretch read there is chance, and
    the simulator would follow it). Raises MeasurementError as fit_service /
    fit_shared_fraction do."""
    a, b, rms, worst = fit_service(points)
    shared = fit_shared_fraction(instance_counts, saturated_rps) if instance_counts else 0.0
    busy = instance_busy(host_saturated_rps, host_points, service_us=lambda n: a + b * n)
    scaled = scaling(instance_counts, shared, host_saturated_rps, host_scaled_rps)
    path = host_bound(busy, *(scaled or (None, None)), unbatched=host_unbatched)
    stretch = 1.0 if host_unbatched else execution_stretch(host_points, lambda n: a + b * n)
    return Calibration(
        model=model,
        points=tuple(points),
        fixed_us=a,
        per_item_us=b,
        fit_rms_rel=rms,
        fit_max_rel=worst,
        overhead_us=max(0.0, overhead_us),
        instance_counts=tuple(instance_counts),
        saturated_rps=tuple(saturated_rps),
        shared_fraction=shared,
        duration_s=duration_s,
        host_us=fit_host_us(host_saturated_rps, path, host_held_rps),
        host_saturated_rps=host_saturated_rps,
        host_busy=busy,
        host_held_rps=host_held_rps if path else 0.0,
        host_scaled_rps=host_scaled_rps,
        loaded_stretch=stretch,
    )


def service_model(cal: Calibration) -> ServiceModel:
    """The simulator's service model of a calibration: the fitted line stretched as the executions
    were under load (loaded_stretch: a trial's sustainable rate is a loaded level), the overhead
    and the request path's ceiling."""
    line = ServiceModel(cal.fixed_us, cal.per_item_us, overhead_us=cal.overhead_us, host_us=cal.host_us)
    return line.stretched(cal.loaded_stretch)


def contention(cal: Calibration) -> Contention:
    """The simulator's contention model of a calibration."""
    return Contention(cal.shared_fraction)

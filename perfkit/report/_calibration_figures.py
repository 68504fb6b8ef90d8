"""Figure data for a predicted tune's calibration (TuneRecord.calibration): execution time per
batch size (the server's per-batch-size statistics as points, the fitted line through them),
how throughput scales with instances (the saturated rates measured, the contention model fitted
to them), and the fit's error in words; one curve per value where the calibration holds one per
precision / instance kind. Data first; drawn by _draw, checked by tests."""

from __future__ import annotations

from perfkit.predict import scaling
from perfkit.records import Calibration, CalibrationPoint
from perfkit.report._figure_types import LineFigure, Series, Table


def fitted_service_ms(cal: Calibration, batch_size: float) -> float:
    """The fitted execution time (ms) of a batch: fixed_us + per_item_us * n."""
    return (cal.fixed_us + cal.per_item_us * batch_size) / 1e3


def _worst_point(cal: Calibration) -> tuple[int, float] | None:
    """(batch size, relative error of the fit there) at the point the fit misses most."""
    worst: tuple[int, float] | None = None
    for p in cal.points:
        if p.service_us <= 0:
            continue
        rel = fitted_service_ms(cal, p.batch_size) * 1e3 / p.service_us - 1
        if worst is None or abs(rel) > abs(worst[1]):
            worst = (p.batch_size, rel)
    return worst


def fit_error_sentence(cal: Calibration) -> str:
    """The calibration's fit and its error, in words."""
    sizes = sorted(p.batch_size for p in cal.points)
    executions = sum(p.executions for p in cal.points)
    worst = _worst_point(cal)
    where = ""
    if worst is not None:
        side = "above" if worst[1] > 0 else "below"
        where = f" (batch size {worst[0]}: the line is {abs(worst[1]):.1%} {side} the measured time)"
    span = f"batch sizes {sizes[0]}–{sizes[-1]}" if len(sizes) > 1 else f"batch size {sizes[0]}" if sizes else "none"
    text = (
        f"Execution time fitted as {cal.fixed_us / 1e3:.2f} ms + {cal.per_item_us / 1e3:.3f} ms per item over"
        f" {len(sizes)} measured batch size(s) ({span}, {executions:,} executions). Fit error:"
        f" {cal.fit_rms_rel:.1%} RMS (weighted by executions), {cal.fit_max_rel:.1%} at worst{where}."
        f" Each request also spends {cal.overhead_us / 1e3:.2f} ms outside the instance."
    )
    if len(cal.instance_counts) >= 2 and len(cal.saturated_rps) == len(cal.instance_counts):
        lo, hi = min(cal.instance_counts), max(cal.instance_counts)
        ratio = scaling_ratio(cal)
        fitted = _scaling(cal.shared_fraction, hi) / _scaling(cal.shared_fraction, lo)
        text += (
            f" Instances: {hi} delivered {ratio:.2f}× what {lo} did at saturation; the contention model"
            f" (shared fraction {cal.shared_fraction:.2f}) gives {fitted:.2f}×"
            f" ({fitted / ratio - 1:+.0%} off the measurement)."
        )
    else:
        text += " Instance scaling was not measured (one instance count): instances are taken as independent."
    if cal.host_saturated_rps > 0:
        stretch = (
            f" (its executions took {cal.loaded_stretch:.2f}× as long as unloaded, and are simulated so)"
            if cal.stretch_worth_telling
            else ""
        )
        told = scaling(cal.instance_counts, cal.shared_fraction, cal.host_saturated_rps, cal.host_scaled_rps)
        scaled = (
            f"; at {max(cal.instance_counts)} instances {cal.host_scaled_rps:,.0f} req/s"
            f" (×{told[0]:.2f}, where their contention gives ×{told[1]:.2f})"
            if told is not None
            else ""
        )
        held = f"; within the budget it held {cal.host_held_rps:,.0f} req/s" if cal.host_held_rps > 0 else ""
        verdict = (
            f"the request path, not the instance, held the rate{held}, so no config is predicted past"
            f" {1e6 / cal.host_us:,.0f} req/s."
            if cal.host_us > 0
            else "the instance held the rate."
        )
        text += (
            f" Saturated, one instance completed {cal.host_saturated_rps:,.0f} req/s while executing"
            f" {cal.host_busy:.0%} of the time{stretch}{scaled}: {verdict}"
        )
    return text + "".join(f" {value_sentence(v)}" for v in cal.values)


def value_sentence(c: Calibration) -> str:
    """One value's curve (Calibration.values), in words: its factor over the first curve where the
    shortcut held, else its own line and contention."""
    sizes = sorted(p.batch_size for p in c.points)
    at = ", ".join(str(n) for n in sizes)
    if c.factor > 0:
        return (
            f"At {c.value}: ×{c.factor:.2f} the first curve ({c.fixed_us / 1e3:.2f} ms + {c.per_item_us / 1e3:.3f} ms"
            f" per item), confirmed at batch sizes {at} (worst {c.fit_max_rel:.1%})."
        )
    shared = f", shared fraction {c.shared_fraction:.2f}" if c.instance_counts else ""
    return (
        f"At {c.value}: {c.fixed_us / 1e3:.2f} ms + {c.per_item_us / 1e3:.3f} ms per item over batch sizes {at}"
        f" ({c.fit_rms_rel:.1%} RMS, {c.fit_max_rel:.1%} worst){shared}."
    )


def scaling_ratio(cal: Calibration) -> float:
    """The saturated rate at the largest instance count measured over that at the smallest."""
    pairs = sorted(zip(cal.instance_counts, cal.saturated_rps, strict=True))
    return pairs[-1][1] / pairs[0][1] if pairs and pairs[0][1] > 0 else float("nan")


def _scaling(shared_fraction: float, instances: int) -> float:
    """Contention.instance_scaling, restated: a report reads records, not the simulator."""
    if shared_fraction <= 0:
        return float(instances)
    return min(float(instances), 1.0 / shared_fraction)


def service_figure(cal: Calibration) -> LineFigure:
    """Execution time (ms) vs batch size: the measured points and the fitted line; one pair per
    value where the calibration holds a curve per precision / instance kind (Calibration.values)."""
    curves = cal.curves()
    top = max([p.batch_size for c in curves for p in c.points] + [1])
    # The line sampled densely enough to read as the straight line it is on a log axis too.
    grid = {float(round(top ** (i / 31), 3)) for i in range(32)} if top > 1 else set()
    series: list[Series] = []
    for c in curves:
        points = tuple((float(p.batch_size), p.service_us / 1e3) for p in sorted(c.points, key=lambda p: p.batch_size))
        xs = sorted({1.0, float(top)} | {float(p.batch_size) for p in c.points} | grid)
        line = tuple((x, fitted_service_ms(c, x)) for x in xs)
        fit = f"fit: {c.fixed_us / 1e3:.2f} + {c.per_item_us / 1e3:.3f}·n ms"
        if not cal.values:
            series += [Series("measured (server batch_stats)", points, group="measured", kind="scatter"),
                       Series(fit, line, group="fit", variant="fit")]  # fmt: skip
            continue
        fit += f" (×{c.factor:.2f} the first curve, confirmed at its points)" if c.factor > 0 else ""
        series += [Series(f"{c.value}: measured", points, group=c.value, kind="scatter"),
                   Series(f"{c.value}: {fit}", line, group=c.value, variant="fit")]  # fmt: skip
    worst = max(curves, key=lambda c: c.fit_max_rel)
    return LineFigure(
        key="calibration-service",
        title="Execution time by batch size" + (", one curve per value" if cal.values else ""),
        x_label="batch size",
        y_label="execution time (ms)",
        series=tuple(series),
        x_log=top >= 8,
        caption=f"Fit error {worst.fit_rms_rel:.1%} RMS, {worst.fit_max_rel:.1%} worst"
        + (f" (the worst curve's, {worst.value})." if cal.values else "."),
    )


def scaling_figure(cal: Calibration) -> LineFigure | None:
    """Saturated throughput vs instance count: the rates measured and the fitted contention model
    through the smallest count's rate; None when fewer than two counts were measured."""
    if len(cal.instance_counts) < 2 or len(cal.saturated_rps) != len(cal.instance_counts):
        return None
    pairs = sorted(zip(cal.instance_counts, cal.saturated_rps, strict=True))
    c0, r0 = pairs[0]
    per = r0 / _scaling(cal.shared_fraction, c0)
    top = max(pairs[-1][0] * 2, 4)
    model = tuple((float(c), per * _scaling(cal.shared_fraction, c)) for c in range(1, top + 1))
    independent = tuple((float(c), per * c) for c in range(1, top + 1))
    return LineFigure(
        key="calibration-scaling",
        title="Throughput by instance count",
        x_label="instances",
        y_label="saturated throughput (infer/s)",
        series=(
            Series("measured", tuple((float(c), r) for c, r in pairs), group="measured", kind="scatter"),
            Series(f"fit: shared fraction {cal.shared_fraction:.2f}", model, group="fit", variant="fit"),
            Series("independent instances", independent, group="independent", variant="ref"),
        ),
        caption=f"{pairs[-1][0]} instances delivered {scaling_ratio(cal):.2f}× {c0} at saturation.",
    )


def calibration_table(cal: Calibration) -> Table:
    """The points the fit was made on, with the fitted time and its error at each; with a curve
    per value, each value's points under its own fit, the value first."""

    def row(c: Calibration, p: CalibrationPoint) -> tuple[object, ...]:
        err = f"{fitted_service_ms(c, p.batch_size) * 1e3 / p.service_us - 1:+.1%}" if p.service_us > 0 else ""
        cells = (p.batch_size, p.executions, p.service_us / 1e3, fitted_service_ms(c, p.batch_size), err)
        return (c.value, *cells) if cal.values else cells

    rows = tuple(row(c, p) for c in cal.curves() for p in sorted(c.points, key=lambda p: p.batch_size))
    columns = ("batch size", "executions", "measured (ms)", "fitted (ms)", "fit error")
    took = " + ".join(f"{c.duration_s:.0f} s" for c in cal.curves())
    return Table(
        key="calibration",
        title="Calibration points",
        columns=(("value", *columns) if cal.values else columns),
        rows=rows,
        note=f"Calibrated in {took} on the running server" + (" (a value each)." if cal.values else "."),
    )

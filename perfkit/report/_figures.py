"""Figure data for profile reports (latency, levels, windows, quality): pure functions, no drawing.

Every figure is data first (series of (x, y) points, bar values) so tests check the
numbers; _draw turns them into SVG. Latencies are in milliseconds here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hdrh.histogram import HdrHistogram

from perfkit.errors import InputError
from perfkit.records import LatencySummary, LevelResult, RunRecord
from perfkit.report._figure_types import (
    BarFigure,
    BarSeries,
    Figure,
    LineFigure,
    Mark,
    Series,
    Table,
    pct_name,
    us_to_ms,
)
from perfkit.report._server_figures import SERVER_PARTS, batch_sizes, gpu_timeline, server_breakdown

__all__ = [  # the figure types and server figures are re-exported: pages import figures from here
    "SERVER_PARTS",
    "BarFigure",
    "BarSeries",
    "Figure",
    "LineFigure",
    "Mark",
    "Series",
    "Table",
    "batch_sizes",
    "gpu_timeline",
    "pct_name",
    "server_breakdown",
    "us_to_ms",
]

# CDFs are thinned to at most about this many points (plus the tail), so pages stay small.
CDF_MAX_POINTS = 400
MARKED_PERCENTILES = (50.0, 90.0, 99.0, 99.9)
# Latency axes turn logarithmic when values span more than this factor (an overloaded level would flatten the rest).
LOG_SCALE_RATIO = 50.0


def run_label(record: RunRecord, index: int, records: list[RunRecord]) -> str:
    """A short name for a run among others: model, and config digest where runs differ."""
    name = str(record.model.name)
    if len(records) == 1:
        return name
    shas = {r.model.served_config_sha256 for r in records}
    names = {r.model.name for r in records}
    sha = str(record.model.served_config_sha256)[:8]
    if len(shas) > 1 and sha:
        return f"{name} @{sha}" if len(names) > 1 else f"config {sha}"
    return f"{name} (run {index + 1})" if len(names) == 1 else name


def level_kinds(record: RunRecord) -> tuple[str, ...]:
    """The latency kinds measured in a run: ('service',) or ('service', 'corrected')."""
    return ("service", "corrected") if any(lv.corrected is not None for lv in record.levels) else ("service",)


def _summary(level: LevelResult, kind: str) -> LatencySummary | None:
    return level.corrected if kind == "corrected" else level.service


def throughput_latency(records: list[RunRecord], labels: list[str] | None = None) -> LineFigure:
    """Throughput (x, infer/s) against p50 and p99 latency (y, ms) over load levels, per run and kind."""
    series = []
    for i, rec in enumerate(records):
        label = labels[i] if labels else run_label(rec, i, records)
        for kind in level_kinds(rec):
            for pct in (50.0, 99.0):
                pts = []
                for lv in rec.levels:
                    s = _summary(lv, kind)
                    if s is not None and s.count > 0:
                        pts.append((lv.throughput_infer_per_s, s.percentile_us(pct) / 1000.0))
                name = f"{pct_name(pct)} {kind}" if len(records) == 1 else f"{label} {pct_name(pct)} {kind}"
                series.append(
                    Series(
                        name,
                        tuple(pts),
                        group=label if len(records) > 1 else pct_name(pct),
                        variant=f"{pct_name(pct)} {kind}" if len(records) > 1 else kind,
                    )
                )
    ys = [y for s in series for _, y in s.points if y > 0]
    log = bool(ys) and max(ys) / min(ys) > LOG_SCALE_RATIO
    return LineFigure(
        key="throughput-latency",
        y_log=log,
        title="Throughput vs latency",
        x_label="throughput (infer/s)",
        y_label="latency (ms, log scale)" if log else "latency (ms)",
        series=tuple(series),
        caption="One point per load level, in order of increasing load. 'corrected' latency counts from when "
        "a request was due (coordinated omission corrected); 'service' from when it was sent.",
    )


def throughput_latency_per_model(records: list[RunRecord]) -> list[LineFigure]:
    """The throughput-latency figure, one per model (small multiples): models whose throughputs differ
    20x get their own axes instead of two of them squashed against the left edge of one."""
    models = list(dict.fromkeys(str(r.model.name) for r in records))
    if len(models) <= 1:
        return [throughput_latency(records)]
    labels = [run_label(rec, i, records) for i, rec in enumerate(records)]
    figures = []
    for model in models:
        idx = [i for i, r in enumerate(records) if str(r.model.name) == model]
        fig = throughput_latency([records[i] for i in idx], [labels[i] for i in idx] if len(idx) > 1 else None)
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in model)
        figures.append(
            dataclasses.replace(fig, key=f"throughput-latency-{safe}", title=f"{model}: throughput vs latency")
        )
    return figures


def decode_histogram(summary: LatencySummary) -> HdrHistogram:
    """The HdrHistogram of a summary; raises InputError when its encoding is unreadable."""
    try:
        hist = HdrHistogram.decode(summary.histogram)
    except Exception as err:  # hdrh raises assorted errors (zlib, struct, base64) on bad input
        raise InputError(f"latency histogram ({summary.kind}) cannot be decoded: {err}") from None
    if hist is None:
        raise InputError(f"latency histogram ({summary.kind}) cannot be decoded")
    return hist


def cdf_points(summary: LatencySummary, max_points: int = CDF_MAX_POINTS) -> tuple[tuple[float, float], ...]:
    """(latency ms, fraction of requests at or below it) from the histogram, thinned; ends at (max, 1.0)."""
    if not summary.histogram:
        return ()
    hist = decode_histogram(summary)
    total = hist.get_total_count()
    if total <= 0:
        return ()
    raw = [(it.value_iterated_to, it.total_count_to_this_value / total) for it in hist.get_recorded_iterator()]
    if not raw:
        return ()
    # Keep a point when the fraction moved enough; in the tail (>= 0.99) keep finer steps.
    step = 1.0 / max_points
    kept = [raw[0]]
    for value, frac in raw[1:-1]:
        last = kept[-1][1]
        if frac - last >= step or (frac >= 0.99 and frac - last >= step / 20):
            kept.append((value, frac))
    if len(raw) > 1:
        kept.append(raw[-1])
    return tuple((float(v) / 1000.0, float(f)) for v, f in kept)


def latency_cdf(record: RunRecord, kind: str) -> LineFigure:
    """Per-level latency CDFs of one kind, with the summary's percentiles marked."""
    series = []
    marks = []
    for lv in record.levels:
        s = _summary(lv, kind)
        if s is None or s.count == 0:
            continue
        label = lv.load.label
        series.append(Series(label, cdf_points(s), group=label, kind="step"))
        for pct in MARKED_PERCENTILES:
            marks.append(Mark(s.percentile_us(pct) / 1000.0, round(pct / 100.0, 6), pct_name(pct), group=label))
    return LineFigure(
        key=f"cdf-{kind}",
        title=f"Latency distribution ({kind})",
        x_label="latency (ms, log scale)",
        y_label="fraction of requests ≤ latency",
        series=tuple(series),
        marks=tuple(marks),
        x_log=True,
        caption="Cumulative distribution per load level from the full HdrHistogram; dots mark p50, p90, p99 and p99.9.",
    )


def percentile_table(record: RunRecord, kind: str) -> Table:
    """Percentiles (ms) per level of one latency kind."""
    rows = []
    for lv in record.levels:
        s = _summary(lv, kind)
        if s is None:
            continue
        rows.append(
            (
                lv.load.label,
                s.count,
                s.min_us / 1000,
                s.mean_us / 1000,
                s.std_us / 1000,
                s.p50_us / 1000,
                s.p90_us / 1000,
                s.p95_us / 1000,
                s.p99_us / 1000,
                s.p999_us / 1000,
                s.max_us / 1000,
                ", ".join(s.thin) or "",
            )
        )
    return Table(
        key=f"percentiles-{kind}",
        title=f"Latency percentiles ({kind}, ms)",
        columns=("load", "requests", "min", "mean", "std", "p50", "p90", "p95", "p99", "p99.9", "max", "thin tail"),
        rows=tuple(rows),
        note="'thin tail': percentiles with fewer than ~10 samples beyond them; read them as indicative.",
    )


def levels_table(record: RunRecord) -> Table:
    """The headline numbers of each level: load, throughput, send and completion rates, latency."""
    rows = []
    for lv in record.levels:
        s = lv.latency()
        rows.append(
            (
                lv.load.label,
                lv.batch_size,
                lv.throughput_infer_per_s,
                lv.sent_rps,
                lv.completed_rps,
                s.kind,
                s.p50_us / 1000,
                s.p99_us / 1000,
                lv.service.p99_us / 1000 if lv.corrected is not None else None,
                lv.request_count,
                lv.duration_s,
            )
        )
    return Table(
        key="levels",
        title="Load levels",
        columns=(
            "load",
            "batch",
            "infer/s",
            "sent req/s",
            "completed req/s",
            "latency kind",
            "p50 ms",
            "p99 ms",
            "service p99 ms",
            "requests",
            "duration s",
        ),
        rows=tuple(rows),
    )


def windows_figure(record: RunRecord) -> tuple[LineFigure, Table] | None:
    """Throughput of each measurement window over the run (stability at a glance); None without windows."""
    series = []
    rows = []
    offset = 0.0
    vlines = []
    for lv in record.levels:
        if not lv.windows:
            offset += lv.duration_s
            continue
        vlines.append((offset, lv.load.label))
        pts = tuple((offset + w.start_s + w.duration_s, w.infer_per_s) for w in lv.windows)
        series.append(Series(lv.load.label, pts, group=lv.load.label))
        for n, w in enumerate(lv.windows):
            rows.append(
                (
                    lv.load.label,
                    n + 1,
                    w.start_s,
                    w.duration_s,
                    w.completed,
                    w.errors,
                    w.infer_per_s,
                    w.p50_us / 1000,
                    w.p99_us / 1000,
                    w.mean_us / 1000,
                )
            )
        offset += max(lv.duration_s, sum(w.duration_s for w in lv.windows))
    if not series:
        return None
    fig = LineFigure(
        key="windows",
        title="Throughput per measurement window",
        x_label="time since the first level (s)",
        y_label="throughput (infer/s)",
        series=tuple(series),
        caption="A flat line within each level means a steady measurement.",
    )
    table = Table(
        key="windows",
        title="Measurement windows",
        columns=("load", "window", "start s", "duration s", "completed", "errors", "infer/s", "p50", "p99", "mean"),
        rows=tuple(rows),
        note="Latencies in ms.",
    )
    return fig, table


def quality_table(record: RunRecord) -> Table:
    """Per level: stability, precision reached, errors, late and dropped sends, notes."""
    rows = []
    classes = []
    for lv in record.levels:
        errs = "; ".join(f"{msg} ×{n}" for msg, n in lv.errors.items())
        rows.append(
            (
                lv.load.label,
                "yes" if lv.stable else "NO",
                None if lv.precision.throughput_rel is None else lv.precision.throughput_rel * 100,
                None if lv.precision.latency_rel is None else lv.precision.latency_rel * 100,
                len(lv.windows),
                lv.error_count,
                errs,
                lv.late_count,
                lv.dropped_count,
                us_to_ms(lv.send_lateness_p99_us),
                lv.note,
            )
        )
        classes.append(
            (
                "",
                "" if lv.stable else "bad",
                "",
                "",
                "",
                "bad" if lv.error_count else "",
                "",
                "warn" if lv.late_count else "",
                "bad" if lv.dropped_count else "",
                "",
                "",
            )
        )
    return Table(
        key="quality",
        title="Measurement quality",
        columns=(
            "load",
            "stable",
            "± throughput %",
            "± latency %",
            "windows",
            "errors",
            "error messages",
            "late sends",
            "dropped sends",
            "send lateness p99 ms",
            "note",
        ),
        rows=tuple(rows),
        note="± columns: half-width of the ~95% confidence interval reached (relative). Late: sent behind schedule; "
        "dropped: never sent because too many requests were in flight.",
        cell_classes=tuple(classes),
    )


def headline(record: RunRecord) -> dict[str, Any]:
    """The at-a-glance numbers: peak throughput and its latency, level counts, problems."""
    levels = list(record.levels)
    peak = max(levels, key=lambda lv: lv.throughput_infer_per_s) if levels else None
    lat = peak.latency() if peak else None
    return {
        "peak_infer_per_s": peak.throughput_infer_per_s if peak else None,
        "peak_level": peak.load.label if peak else None,
        "peak_p99_ms": lat.p99_us / 1000 if lat else None,
        "peak_p50_ms": lat.p50_us / 1000 if lat else None,
        "latency_kind": lat.kind if lat else None,
        "levels": len(levels),
        "unstable": sum(1 for lv in levels if not lv.stable),
        "errors": sum(lv.error_count for lv in levels),
        "late": sum(lv.late_count for lv in levels),
        "dropped": sum(lv.dropped_count for lv in levels),
    }

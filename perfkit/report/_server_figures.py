"""Figure data for the server side of a profile: time breakdown, batch sizes formed, GPU metrics."""

from __future__ import annotations

from typing import Any

from perfkit.records import LevelResult, RunRecord
from perfkit.report._figure_types import BarFigure, BarSeries, LineFigure, Series, Table

SERVER_PARTS = (
    ("queue", "queue_avg_us"),
    ("compute input", "compute_input_avg_us"),
    ("compute infer", "compute_infer_avg_us"),
    ("compute output", "compute_output_avg_us"),
)


def server_breakdown(record: RunRecord) -> tuple[BarFigure, Table] | None:
    """Where a request's server time went per level (stacked, ms), and the table; None without server stats."""
    levels = [lv for lv in record.levels if lv.server is not None]
    if not levels:
        return None
    cats = tuple(lv.load.label for lv in levels)
    series = tuple(
        BarSeries(name, tuple(getattr(lv.server, attr) / 1000 for lv in levels), group=name)
        for name, attr in SERVER_PARTS
    )
    rows = []
    for lv in levels:
        srv = lv.server
        assert srv is not None
        client_mean = lv.service.mean_us / 1000
        rows.append(
            (
                lv.load.label,
                srv.queue_avg_us / 1000,
                srv.compute_input_avg_us / 1000,
                srv.compute_infer_avg_us / 1000,
                srv.compute_output_avg_us / 1000,
                srv.request_avg_us / 1000,
                client_mean,
                client_mean - srv.request_avg_us / 1000,
                srv.request_count,
                srv.execution_count,
                srv.failures,
            )
        )
    fig = BarFigure(
        key="server-breakdown",
        title="Server-side time per request",
        category_label="load level",
        value_label="average time per request (ms)",
        categories=cats,
        series=series,
        stacked=True,
        caption="Triton's own statistics (deltas over each level): time queued, copying inputs, running the model, "
        "copying outputs.",
    )
    table = Table(
        key="server-breakdown",
        title="Server-side breakdown (ms, averages per request)",
        columns=(
            "load",
            "queue",
            "compute input",
            "compute infer",
            "compute output",
            "server total",
            "client mean",
            "client − server",
            "requests",
            "executions",
            "failures",
        ),
        rows=tuple(rows),
        note="'client − server': network, serialization and client overhead.",
    )
    return fig, table


def batch_sizes(record: RunRecord) -> tuple[BarFigure, Table] | None:
    """Share of executions by the batch size Triton formed, per level; None when not reported."""
    levels = [lv for lv in record.levels if lv.server is not None and lv.server.batch_sizes]
    if not levels:
        return None
    sizes = sorted({int(k) for lv in levels for k in lv.server.batch_sizes})  # type: ignore[union-attr]  # levels without server statistics were filtered out above
    series = []
    for size in sizes:
        vals: list[float | None] = []
        for lv in levels:
            counts = lv.server.batch_sizes  # type: ignore[union-attr]  # levels without server statistics were filtered out above
            total = sum(counts.values())
            vals.append(100.0 * counts.get(str(size), 0) / total if total else None)
        series.append(BarSeries(f"batch {size}", tuple(vals), group=f"batch {size}"))
    rows = []
    for lv in levels:
        counts = lv.server.batch_sizes  # type: ignore[union-attr]  # levels without server statistics were filtered out above
        total = sum(counts.values())
        mean = sum(int(k) * v for k, v in counts.items()) / total if total else None
        rows.append((lv.load.label, total, mean, *(counts.get(str(s), 0) for s in sizes)))
    fig = BarFigure(
        key="batch-sizes",
        title="Batch sizes formed by Triton",
        category_label="load level",
        value_label="share of executions (%)",
        categories=tuple(lv.load.label for lv in levels),
        series=tuple(series),
        stacked=True,
        caption="How many requests each model execution carried (dynamic batching at work).",
    )
    table = Table(
        key="batch-sizes",
        title="Executions by batch size",
        columns=("load", "executions", "mean batch", *(f"batch {s}" for s in sizes)),
        rows=tuple(rows),
    )
    return fig, table


def _metric_times(record: RunRecord) -> list[tuple[float, LevelResult, Any]]:
    # Sample times may run over the whole run or restart at each level; lay levels end to end if they restart.
    out = []
    offset = 0.0
    last = float("-inf")
    restarts = False
    for lv in record.levels:
        if lv.metrics and lv.metrics[0].t_s < last:
            restarts = True
        if lv.metrics:
            last = lv.metrics[-1].t_s
    for lv in record.levels:
        for m in lv.metrics:
            out.append(((offset if restarts else 0.0) + m.t_s, lv, m))
        offset += lv.duration_s
    return out


def gpu_timeline(record: RunRecord) -> tuple[LineFigure, LineFigure, Table] | None:
    """GPU utilization (%) and memory used (GiB) over time, per GPU; None when no metrics were collected."""
    samples = _metric_times(record)
    if not samples:
        return None
    gpus = list(dict.fromkeys(m.gpu for _, _, m in samples))
    util_series = []
    mem_series = []
    for gpu in gpus:
        util = tuple((t, m.utilization * 100) for t, _, m in samples if m.gpu == gpu and m.utilization is not None)
        mem = tuple(
            (t, m.memory_used_bytes / 2**30) for t, _, m in samples if m.gpu == gpu and m.memory_used_bytes is not None
        )
        util_series.append(Series(gpu, util, group=gpu))
        mem_series.append(Series(gpu, mem, group=gpu))
    starts: list[tuple[float, str]] = []
    seen = set()
    for t, lv, _ in samples:
        if lv.load.label not in seen:
            seen.add(lv.load.label)
            starts.append((t, lv.load.label))
    totals = [m.memory_total_bytes for _, _, m in samples if m.memory_total_bytes]
    util_fig = LineFigure(
        key="gpu-util",
        title="GPU utilization",
        x_label="time (s)",
        y_label="utilization (%)",
        series=tuple(util_series),
        vlines=tuple(starts),
        caption="Vertical lines mark the start of each load level.",
    )
    mem_fig = LineFigure(
        key="gpu-memory",
        title="GPU memory used",
        x_label="time (s)",
        y_label="memory used (GiB)",
        series=tuple(mem_series),
        vlines=tuple(starts),
        hlines=((max(totals) / 2**30, "total"),) if totals else (),
    )
    rows = tuple(
        (
            round(t, 3),
            lv.load.label,
            m.gpu,
            None if m.utilization is None else m.utilization * 100,
            None if m.memory_used_bytes is None else m.memory_used_bytes / 2**30,
            None if m.memory_total_bytes is None else m.memory_total_bytes / 2**30,
            m.power_w,
        )
        for t, lv, m in samples
    )
    table = Table(
        key="gpu",
        title="GPU samples",
        columns=("t s", "load", "gpu", "utilization %", "memory GiB", "total GiB", "power W"),
        rows=rows,
    )
    return util_fig, mem_fig, table

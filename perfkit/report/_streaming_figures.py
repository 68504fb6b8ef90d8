"""Figures of streamed runs: TTFT and ITL distributions, tokens/s against load, the streaming table."""

from __future__ import annotations

from perfkit.records import RunRecord
from perfkit.report._figure_types import LineFigure, Mark, Series, Table
from perfkit.report._figures import cdf_points

_MARKED = (50.0, 90.0, 99.0)


def has_streaming(record: RunRecord) -> bool:
    """Whether any level of the run carries streaming figures."""
    return any(lv.streaming is not None for lv in record.levels)


def streaming_cdf(record: RunRecord, which: str) -> LineFigure:
    """Per-level CDF of TTFT ('ttft') or inter-token latency ('itl'), percentiles marked."""
    series, marks = [], []
    for lv in record.levels:
        st = lv.streaming
        if st is None:
            continue
        summary = st.ttft if which == "ttft" else st.itl
        if summary.count == 0:
            continue
        label = lv.load.label
        series.append(Series(label, cdf_points(summary), group=label, kind="step"))
        for pct in _MARKED:
            marks.append(Mark(summary.percentile_us(pct) / 1000.0, pct / 100.0, f"p{pct:g}", group=label))
    name = "Time to first token" if which == "ttft" else "Inter-token latency"
    what = "from send to the first non-empty response" if which == "ttft" else "between consecutive responses"
    return LineFigure(
        key=f"stream-{which}",
        title=f"{name} distribution",
        x_label="ms (log scale)",
        y_label="fraction ≤ value",
        series=tuple(series),
        marks=tuple(marks),
        x_log=True,
        caption=f"{name}: {what}, per load level, from the full HdrHistogram; dots mark p50, p90 and p99.",
    )


def tokens_vs_load(records: list[RunRecord], labels: list[str] | None = None) -> LineFigure:
    """Output tokens/s against the load level (concurrency or request rate), one line per run."""
    series = []
    for i, rec in enumerate(records):
        points = tuple(
            (lv.load.value, lv.streaming.output_tokens_per_s) for lv in rec.levels if lv.streaming is not None
        )
        if points:
            label = labels[i] if labels else rec.model.name or "run"
            series.append(Series(label, points, group=label))
    modes = {lv.load.mode for rec in records for lv in rec.levels}
    x_label = "concurrency" if modes == {"concurrency"} else "load (concurrency or requests/s)"
    return LineFigure(
        key="stream-tokens",
        title="Output tokens/s vs load",
        x_label=x_label,
        y_label="output tokens/s",
        series=tuple(series),
        caption="Non-empty responses (one per token) per second at each load level.",
    )


def streaming_table(record: RunRecord) -> Table:
    """Per level: TTFT, ITL, second token, tokens/s, tokens per request, goodput."""
    rows = []
    for lv in record.levels:
        st = lv.streaming
        if st is None:
            continue
        corrected = st.ttft_corrected.p99_us / 1000 if st.ttft_corrected else None
        rows.append(
            (
                lv.load.label,
                st.request_count,
                st.ttft.p50_us / 1000,
                st.ttft.p99_us / 1000,
                corrected,
                st.itl.p50_us / 1000,
                st.itl.p99_us / 1000,
                st.second_token.p50_us / 1000,
                st.output_tokens_per_s,
                st.output_len_mean,
                st.goodput_rps,
            )
        )
    return Table(
        key="streaming",
        title="Streaming figures (ms unless stated)",
        columns=(
            "load",
            "requests",
            "TTFT p50",
            "TTFT p99",
            "TTFT p99 from due",
            "ITL p50",
            "ITL p99",
            "2nd token p50",
            "tokens/s",
            "tokens/request",
            "goodput req/s",
        ),  # fmt: skip
        rows=tuple(rows),
        note="TTFT from due: open loop, counted from when the request was due (coordinated omission corrected).",
    )

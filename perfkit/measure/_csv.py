"""Tabular views of a run record: a pandas DataFrame, and perf_analyzer's -f CSV."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from perfkit.records import LevelResult, RunRecord

if TYPE_CHECKING:
    import pandas as pd

# perf_analyzer's CSV header (concurrency mode); "Request Rate" replaces the first column in
# request-rate modes. Times are microseconds, as perf_analyzer writes them.
PA_COLUMNS = [
    "Concurrency",
    "Inferences/Second",
    "Client Send",
    "Network+Server Send/Recv",
    "Server Queue",
    "Server Compute Input",
    "Server Compute Infer",
    "Server Compute Output",
    "Client Recv",
    "p50 latency",
    "p90 latency",
    "p95 latency",
    "p99 latency",
    "Avg latency",
    "request/response",
    "response wait",
]


def _row(level: LevelResult) -> dict[str, float | int | str | bool | None]:
    lat = level.latency()
    srv = level.server
    row: dict[str, float | int | str | bool | None] = {
        "mode": level.load.mode,
        "load": level.load.value,
        "distribution": level.load.distribution,
        "batch_size": level.batch_size,
        "throughput_infer_per_s": level.throughput_infer_per_s,
        "sent_rps": level.sent_rps,
        "completed_rps": level.completed_rps,
        "latency_kind": lat.kind,
        "p50_us": lat.p50_us,
        "p90_us": lat.p90_us,
        "p95_us": lat.p95_us,
        "p99_us": lat.p99_us,
        "p999_us": lat.p999_us,
        "avg_us": lat.mean_us,
        "std_us": lat.std_us,
        "min_us": lat.min_us,
        "max_us": lat.max_us,
        "service_p50_us": level.service.p50_us,
        "service_p99_us": level.service.p99_us,
        "requests": level.request_count,
        "errors": level.error_count,
        "late": level.late_count,
        "dropped": level.dropped_count,
        "send_lateness_p99_us": level.send_lateness_p99_us,
        "stable": level.stable,
        "throughput_ci_rel": level.precision.throughput_rel,
        "latency_ci_rel": level.precision.latency_rel,
        "windows": len(level.windows),
        "duration_s": level.duration_s,
    }
    st = level.streaming
    if st is not None:
        row.update(
            {
                "ttft_p50_us": st.ttft.p50_us,
                "ttft_p99_us": st.ttft.p99_us,
                "ttft_corrected_p99_us": st.ttft_corrected.p99_us if st.ttft_corrected else None,
                "itl_p50_us": st.itl.p50_us,
                "itl_p99_us": st.itl.p99_us,
                "second_token_p50_us": st.second_token.p50_us,
                "responses_per_s": st.responses_per_s,
                "output_tokens_per_s": st.output_tokens_per_s,
                "output_len_mean": st.output_len_mean,
                "goodput_rps": st.goodput_rps,
            }
        )
    if srv is not None:
        row.update(
            {
                "server_queue_us": srv.queue_avg_us,
                "server_compute_input_us": srv.compute_input_avg_us,
                "server_compute_infer_us": srv.compute_infer_avg_us,
                "server_compute_output_us": srv.compute_output_avg_us,
                "server_request_us": srv.request_avg_us,
                "server_executions": srv.execution_count,
            }
        )
    return row


def levels_frame(record: RunRecord) -> pd.DataFrame:
    """One row per load level with every headline figure (units in column names)."""
    import pandas as pd  # here, not at import: every `perf_analyzer` run would pay its import (~0.3 s)

    return pd.DataFrame([_row(level) for level in record.levels])


def _pa_row(level: LevelResult) -> list[float | int]:
    lat = level.latency("service")
    srv = level.server
    queue = srv.queue_avg_us if srv else 0.0
    c_in = srv.compute_input_avg_us if srv else 0.0
    c_inf = srv.compute_infer_avg_us if srv else 0.0
    c_out = srv.compute_output_avg_us if srv else 0.0
    server_total = srv.request_avg_us if srv else 0.0
    return [
        level.load.value if level.load.mode != "concurrency" else int(level.load.value),
        round(level.throughput_infer_per_s, 2),
        0,  # client send: not separated by perfkit's client (included in network)
        round(max(lat.mean_us - server_total, 0.0)),
        round(queue),
        round(c_in),
        round(c_inf),
        round(c_out),
        0,
        round(lat.p50_us),
        round(lat.p90_us),
        round(lat.p95_us),
        round(lat.p99_us),
        round(lat.mean_us),
        0,
        0,
    ]


# The percentiles perf_analyzer always reports; --percentile N adds pN among them, in order
# (src/inference_profiler.cc, InferenceProfiler::SummarizeLatency: std::set{50, 90, 95, 99} plus the
# percentile asked for; src/report_writer.cc writes one ",pN latency" column per entry).
PA_PERCENTILES = (50, 90, 95, 99)


def _extra_percentile(record: RunRecord) -> int | None:
    """The -f CSV's extra percentile column: --percentile when it is none of PA_PERCENTILES (perf_analyzer
    reads it as an integer)."""
    pct = record.spec.percentile
    if pct is None or int(pct) in PA_PERCENTILES:
        return None
    return int(pct)


def _percentile_us(level: LevelResult, pct: int) -> float:
    """The level's client latency at `pct`, from its histogram (0 where it kept none)."""
    from hdrh.histogram import HdrHistogram

    summary = level.latency("service")
    if not summary.histogram:
        return 0.0
    return float(HdrHistogram.decode(summary.histogram.encode()).get_value_at_percentile(pct))


MIX_TOTAL = "total"  # the Model column's name for a mixed level's whole-mix row


def write_csv(record: RunRecord, path: Path) -> Path:
    """perf_analyzer-compatible CSV (same header and units) so existing scripts keep working.

    A traffic mix (spec.mix) adds a first column, Model: each level's whole-mix row (`total`)
    is followed by one row per model of the mix.
    """
    rows: list[list[float | int | str]] = []
    levels: list[LevelResult] = []
    first = "Concurrency"
    mixed = bool(record.spec.mix)
    for level in record.levels:
        if level.load.mode != "concurrency":
            first = "Request Rate"
        if not mixed:
            rows.append(list(_pa_row(level)))
            levels.append(level)
            continue
        rows.append([MIX_TOTAL, *_pa_row(level)])
        levels.append(level)
        for share in level.models:
            rows.append([share.model, *_pa_row(share.result)])
            levels.append(share.result)
    columns = [first, *PA_COLUMNS[1:]]
    extra = _extra_percentile(record)
    if extra is not None:  # pN among the percentile columns, in order
        below = [p for p in PA_PERCENTILES if p < extra]
        at = columns.index(f"p{below[-1]} latency") + 1 if below else columns.index("p50 latency")
        columns.insert(at, f"p{extra} latency")
        for row, level in zip(rows, levels):
            row.insert(at + (1 if mixed else 0), round(_percentile_us(level, extra)))
    if any(level.streaming is not None for level in record.levels):
        # perf_analyzer adds this column for decoupled models: responses per second
        columns.insert(2, "Response Throughput")
        for row, level in zip(rows, levels):
            row.insert(2, round(level.streaming.responses_per_s, 2) if level.streaming else 0)
    if mixed:
        columns.insert(0, "Model")
    import pandas as pd  # here, not at import (see levels_frame)

    frame = pd.DataFrame(rows, columns=columns)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False)
    return path

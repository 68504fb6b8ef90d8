"""Gate metrics of streamed runs: TTFT and ITL percentiles, output tokens per second.

Values come from a level's StreamingSummary: the headline figure over the whole level,
and the per-window figures the significance test resamples. TTFT is measured from the
send time (service), in open and closed loop alike.
"""

from __future__ import annotations

import numpy as np

from perfkit.records import LatencySummary, LevelResult

# metric -> (summary field, percentile) ; tokens: output tokens per second (higher is better)
STREAM_METRICS: dict[str, tuple[str, float]] = {
    "ttft_p50": ("ttft", 50.0),
    "ttft_p99": ("ttft", 99.0),
    "itl_p50": ("itl", 50.0),
    "itl_p99": ("itl", 99.0),
    "tokens": ("output_tokens_per_s", 0.0),
}
ALIASES = {"tokens/s": "tokens", "ttft": "ttft_p99", "itl": "itl_p99"}


def stream_values(level: LevelResult, metric: str) -> tuple[float, np.ndarray] | None:
    """(level value, per-window values) of a streaming metric; None when the level has no streaming figures."""
    st = level.streaming
    if st is None:
        return None
    if metric == "tokens":
        return st.output_tokens_per_s, np.array([w.output_tokens_per_s for w in st.windows], dtype=float)
    field, pct = STREAM_METRICS[metric]
    summary: LatencySummary = getattr(st, field)
    attr = f"{field}_p{int(pct)}_us"
    return summary.percentile_us(pct), np.array([getattr(w, attr) for w in st.windows], dtype=float)


def stream_summary(level: LevelResult, metric: str) -> LatencySummary | None:
    """The latency summary behind a TTFT/ITL metric (for sample-count checks); None for tokens."""
    if level.streaming is None or metric == "tokens":
        return None
    summary: LatencySummary = getattr(level.streaming, STREAM_METRICS[metric][0])
    return summary

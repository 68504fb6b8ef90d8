"""perf_analyzer's --binary-search: the order it measures levels in, for runs that end levels by its rule.

perf_analyzer 2.60 (src/inference_profiler.h at commit 263c5f6e, InferenceProfiler::Profile with
SearchMode::BINARY) measures the range's start, and stops there if it does not meet the threshold; then its
end, and stops there if it does; then bisects the values between (`(end + start) / 2`, integral for
concurrency) while end - start > step, moving start up to a level that meets it and end down to one that
does not. A level meets it when it is stable and its latency (average, or --percentile) is under -l
(Profile: `stabilizing_latency_ms >= latency_threshold_ms` fails it; an unstable level fails it too).
perfkit's own search (_loop._binary_search) bisects the range's indices from the middle instead: it
measures fewer levels over a wide range, but not the ones perf_analyzer measures, and more where
perf_analyzer stops at the start.
"""

from __future__ import annotations

from collections.abc import Callable

from perfkit.records import LevelResult, LoadLevel, ProfileSpec


def meets_threshold(spec: ProfileSpec, result: LevelResult) -> bool:
    """perf_analyzer's meets_threshold for a level: stable, and its latency statistic under -l."""
    if not result.stable:
        return False
    if spec.latency_threshold_ms is None:
        return True
    lat = result.latency("service")  # perf_analyzer's latency runs from the send
    value = lat.mean_us if spec.percentile is None else lat.percentile_us(spec.percentile)
    return value is not None and value < spec.latency_threshold_ms * 1e3


def pa_binary_search(spec: ProfileSpec, run: Callable[[LoadLevel], LevelResult]) -> None:
    """Measure spec's range in perf_analyzer's binary-search order (run measures one level)."""
    values = sorted({lv.value for lv in spec.levels})
    template = spec.levels[0]
    start, end = values[0], values[-1]
    step = values[1] - values[0] if len(values) > 1 else 0.0
    closed = template.mode == "concurrency"

    def meets(value: float) -> bool:
        return meets_threshold(spec, run(LoadLevel(template.mode, value, template.distribution)))

    if not meets(start) or len(values) == 1 or meets(end):
        return
    lo, hi = start, end
    while hi - lo > step:
        mid = float((int(hi) + int(lo)) // 2) if closed else (hi + lo) / 2
        if meets(mid):
            lo = mid
        else:
            hi = mid

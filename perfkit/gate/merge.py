"""Pool the rounds of an A/B run into one record per arm (windows kept, histograms merged)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from hdrh.histogram import HdrHistogram

from perfkit.errors import InputError
from perfkit.recorder import thin_percentiles
from perfkit.records import LatencySummary, LevelResult, Precision, RunRecord, Window


def merge_summaries(summaries: Sequence[LatencySummary]) -> LatencySummary:
    """One summary over several, by adding their HdrHistograms bucket by bucket (exact).

    Raises InputError when a histogram is missing or does not decode: averaging percentiles
    instead would give a figure that is no percentile of anything, so perfkit refuses.
    """
    first = summaries[0]
    if len(summaries) == 1:
        return first
    hists = []
    for i, s in enumerate(summaries):
        try:
            hist = HdrHistogram.decode(s.histogram.encode()) if s.histogram else None
        except Exception:  # hdrh raises bare decoding errors of several kinds on a garbled string
            hist = None
        if hist is None:
            raise InputError(
                f"cannot pool {len(summaries)} measurements of one level exactly: the {s.kind} latency "
                f"histogram of measurement {i + 1} is missing or does not decode",
                hint="compare single runs, or re-profile with this perfkit (it keeps the histograms)",
            )
        hists.append(hist)
    merged = hists[0]
    for h in hists[1:]:
        merged.add(h)

    def pct(p: float) -> float:
        return float(merged.get_value_at_percentile(p))

    encoded = merged.encode()
    # Mean, spread and extremes of the union follow exactly from each part's (the histogram's own
    # mean and stddev walk every bucket in Python: seconds per merge).
    total = sum(s.count for s in summaries)
    weights = [s.count / total if total else 1 / len(summaries) for s in summaries]
    mean_us = sum(w * s.mean_us for w, s in zip(weights, summaries))
    var_us2 = sum(w * (s.std_us**2 + (s.mean_us - mean_us) ** 2) for w, s in zip(weights, summaries))
    return dataclasses.replace(
        first,
        count=total,
        min_us=min(s.min_us for s in summaries),
        max_us=max(s.max_us for s in summaries),
        mean_us=mean_us,
        std_us=var_us2**0.5,
        p50_us=pct(50),
        p90_us=pct(90),
        p95_us=pct(95),
        p99_us=pct(99),
        p999_us=pct(99.9),
        histogram=encoded.decode() if isinstance(encoded, bytes) else str(encoded),
        thin=thin_percentiles(total),
    )


def merge_levels(levels: Sequence[LevelResult]) -> LevelResult:
    """One level over several rounds of the same load: counts summed, windows concatenated."""
    first = levels[0]
    if len(levels) == 1:
        return first
    duration = sum(lv.duration_s for lv in levels)
    windows: list[Window] = []
    offset = 0.0
    for lv in levels:
        windows += [dataclasses.replace(w, start_s=w.start_s + offset) for w in lv.windows]
        offset += lv.duration_s
    errors: dict[str, int] = {}
    for lv in levels:
        for k, v in lv.errors.items():
            errors[k] = errors.get(k, 0) + v
    lateness = [lv.send_lateness_p99_us for lv in levels if lv.send_lateness_p99_us is not None]

    def weighted(attr: str) -> float:
        if duration <= 0:
            return sum(getattr(lv, attr) for lv in levels) / len(levels)
        return sum(getattr(lv, attr) * lv.duration_s for lv in levels) / duration

    corrected = [lv.corrected for lv in levels if lv.corrected is not None]
    return dataclasses.replace(
        first,
        stable=all(lv.stable for lv in levels),
        precision=Precision(None, None, method=f"merged from {len(levels)} rounds"),
        duration_s=duration,
        request_count=sum(lv.request_count for lv in levels),
        inference_count=sum(lv.inference_count for lv in levels),
        throughput_infer_per_s=weighted("throughput_infer_per_s"),
        sent_rps=weighted("sent_rps"),
        completed_rps=weighted("completed_rps"),
        error_count=sum(lv.error_count for lv in levels),
        errors=errors,
        late_count=sum(lv.late_count for lv in levels),
        dropped_count=sum(lv.dropped_count for lv in levels),
        send_lateness_p99_us=max(lateness) if lateness else None,
        service=merge_summaries([lv.service for lv in levels]),
        corrected=merge_summaries(corrected) if len(corrected) == len(levels) else None,
        windows=tuple(windows),
        server=None,
        metrics=tuple(m for lv in levels for m in lv.metrics),
        note=f"merged from {len(levels)} A/B rounds",
    )


def merge_runs(records: Sequence[RunRecord]) -> RunRecord:
    """One record from the rounds of one arm; levels matched by position and load."""
    first = records[0]
    levels = []
    for i, lv in enumerate(first.levels):
        group = [
            r.levels[i]
            for r in records
            if i < len(r.levels) and r.levels[i].load == lv.load and r.levels[i].batch_size == lv.batch_size
        ]
        levels.append(merge_levels(group))
    bad = [r for r in records if r.status != "ok"]
    return dataclasses.replace(
        first,
        levels=tuple(levels),
        status=bad[0].status if bad else "ok",
        error=bad[0].error if bad else None,
    )

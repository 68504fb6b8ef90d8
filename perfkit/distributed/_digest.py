"""What crosses the network: bounded digests of a worker's samples, and their exact merge.

A worker keeps its raw samples in its own LevelRecorder (on its own node) and sends the
coordinator only per-window HdrHistograms and counts, so what travels per level is bounded by
(windows x histogram size), whatever the request rate. Merging adds histograms bucket by
bucket and sums counts: the merged figures are what one process would have recorded for the
same samples -- counts, minimum, maximum, mean and standard deviation exactly (up to float
rounding), percentiles within the histogram's precision (3 significant digits).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from hdrh.histogram import HdrHistogram

from perfkit.recorder import (
    MIN_TAIL_SAMPLES,
    PRECISION_METHOD,
    LevelRecorder,
    histogram_of,
    mean_ci_rel,
    merge_histograms,
    quantile_ci_rel_at,
    thin_percentiles,
)
from perfkit.records import (
    STATUS_CONNECTION_CLOSED,
    STATUS_CONNECTION_REFUSED,
    STATUS_OK,
    STATUS_UNFINISHED,
    LatencyKind,
    LatencySummary,
    LevelCounts,
    Precision,
    Window,
)


@dataclass(frozen=True)
class WindowDigest:
    """One worker's window k: its counts, and histograms of the latencies that finished in it.

    `service_hist`: service latency (us) of the requests completed OK in the window (the
    window's own p50/p99). `level_hist`: the level's latency kind (service in closed loop,
    corrected in open loop) of the level's requests completed in the window (precision).
    `sent`/`completed`: cumulative over the level so far (whether the server keeps up).
    """

    window: Window
    service_hist: str
    service_sum_us: float
    level_hist: str
    level_n: int
    level_sum_us: float
    level_sq_sum_us2: float
    sent: int
    completed: int
    connection_errors: bool = False


@dataclass(frozen=True)
class LevelDigest:
    """One worker's whole level: its counts and latency summaries (histograms inside)."""

    counts: LevelCounts
    service: LatencySummary
    corrected: LatencySummary | None
    lateness_hist: str | None  # send lateness (us) of open-loop sends, for the merged p99
    error_examples: dict[int, str] = field(default_factory=dict)


def _encode(hist: HdrHistogram) -> str:
    return str(hist.encode().decode())


def _level_latencies(rec: LevelRecorder, end_ns: int) -> tuple[np.ndarray, np.ndarray]:
    # The recorder's attribution: in the level by due (open) or sent (closed) time.
    s = rec.samples
    t = s.sent_ns if rec.closed_loop else s.due_ns
    mask = (t >= rec.start_ns) & (t < end_ns)
    if rec.closed_loop:
        mask &= s.status == STATUS_OK
        return (s.done_ns[mask] - s.sent_ns[mask]) / 1e3, s.done_ns[mask]
    mask &= (s.status == STATUS_OK) | (s.status == STATUS_UNFINISHED)
    return (s.done_ns[mask] - s.due_ns[mask]) / 1e3, s.done_ns[mask]


def window_digest(rec: LevelRecorder, k: int) -> WindowDigest:
    """Digest of window k (1-based) of a worker's recorder, once its end has passed."""
    s = rec.samples
    window = rec.windows(k)[-1]
    w0 = rec.start_ns + (k - 1) * rec.window_ns
    w1 = w0 + rec.window_ns
    in_window_ok = (s.done_ns >= w0) & (s.done_ns < w1) & (s.status == STATUS_OK)
    service = (s.done_ns[in_window_ok] - s.sent_ns[in_window_ok]) / 1e3
    lat, done = _level_latencies(rec, w1)
    lat = lat[(done >= w0) & (done < w1)]
    t = s.sent_ns if rec.closed_loop else s.due_ns
    in_level = (t >= rec.start_ns) & (t < w1)
    sent = int((in_level & (s.sent_ns >= 0)).sum())
    completed = int(((s.done_ns >= rec.start_ns) & (s.done_ns < w1)).sum())
    conn = bool(((s.status == STATUS_CONNECTION_REFUSED) | (s.status == STATUS_CONNECTION_CLOSED)).any()) or bool(
        s.error_examples
    )
    return WindowDigest(
        window=window,
        service_hist=_encode(histogram_of(service)),
        service_sum_us=float(service.sum()),
        level_hist=_encode(histogram_of(lat)),
        level_n=int(lat.size),
        level_sum_us=float(lat.sum()),
        level_sq_sum_us2=float((lat * lat).sum()),
        sent=sent,
        completed=completed,
        connection_errors=conn,
    )


def level_digest(rec: LevelRecorder, end_ns: int) -> LevelDigest:
    """Digest of a worker's whole level (after its stop): counts, summaries, lateness histogram."""
    from perfkit.recorder import summarize

    counts = rec.counts(end_ns)
    lateness_hist = None
    if not rec.closed_loop:
        s = rec.samples
        mask = (s.due_ns >= rec.start_ns) & (s.due_ns < end_ns) & (s.sent_ns >= 0)
        lateness_hist = _encode(histogram_of((s.sent_ns[mask] - s.due_ns[mask]) / 1e3))
    return LevelDigest(
        counts=counts,
        service=summarize("service", rec.latencies_us(end_ns, "service")),
        corrected=None if rec.closed_loop else summarize("corrected", rec.latencies_us(end_ns, "corrected")),
        lateness_hist=lateness_hist,
        error_examples=dict(rec.samples.error_examples),
    )


# -- merging (coordinator side) -------------------------------------------------------------------


def merge_summaries(kind: LatencyKind, parts: Sequence[LatencySummary]) -> LatencySummary:
    """One LatencySummary from several workers': histograms added, moments pooled exactly."""
    hist = merge_histograms([p.histogram for p in parts])
    live = [p for p in parts if p.count > 0]
    n = sum(p.count for p in live)
    if n == 0:
        return LatencySummary(kind, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, _encode(hist), thin_percentiles(0))
    mean = sum(p.count * p.mean_us for p in live) / n
    # summarize() reports the population sd; pool second moments about zero, then centre.
    second = sum(p.count * (p.std_us**2 + p.mean_us**2) for p in live) / n
    std = math.sqrt(max(second - mean * mean, 0.0))
    return _summary(kind, hist, n, min(p.min_us for p in live), max(p.max_us for p in live), mean, std)


def _summary(
    kind: LatencyKind, hist: HdrHistogram, n: int, min_us: float, max_us: float, mean_us: float, std_us: float
) -> LatencySummary:
    """A LatencySummary of n > 0 latencies whose percentiles are read from their merged histogram."""
    pct = {q: float(hist.get_value_at_percentile(q)) for q in (50.0, 90.0, 95.0, 99.0, 99.9)}
    return LatencySummary(
        kind=kind,
        count=n,
        min_us=min_us,
        max_us=max_us,
        mean_us=mean_us,
        std_us=std_us,
        p50_us=pct[50.0],
        p90_us=pct[90.0],
        p95_us=pct[95.0],
        p99_us=pct[99.0],
        p999_us=pct[99.9],
        histogram=_encode(hist),
        thin=thin_percentiles(n),
    )


def merge_counts(parts: Sequence[LevelCounts], lateness_hists: Sequence[str | None]) -> LevelCounts:
    """Sum workers' counts (rates are over one shared period, so they add too)."""
    errors: dict[str, int] = {}
    for c in parts:
        for name, n in c.errors.items():
            errors[name] = errors.get(name, 0) + n
    known = [h for h in lateness_hists if h is not None]
    lateness_p99_us = None
    if known:
        hist = merge_histograms(known)
        lateness_p99_us = float(hist.get_value_at_percentile(99.0)) if hist.get_total_count() else None
    return LevelCounts(
        request_count=sum(c.request_count for c in parts),
        inference_count=sum(c.inference_count for c in parts),
        throughput_infer_per_s=sum(c.throughput_infer_per_s for c in parts),
        sent_rps=sum(c.sent_rps for c in parts),
        completed_rps=sum(c.completed_rps for c in parts),
        error_count=sum(c.error_count for c in parts),
        errors=dict(sorted(errors.items())),
        late_count=sum(c.late_count for c in parts),
        dropped_count=sum(c.dropped_count for c in parts),
        send_lateness_p99_us=lateness_p99_us,
    )


def merge_window(parts: Sequence[WindowDigest]) -> Window:
    """Window k of the whole run from every worker's window k (one time base)."""
    first = parts[0].window
    completed = sum(p.window.completed for p in parts)
    hist = merge_histograms([p.service_hist for p in parts])
    return Window(
        start_s=first.start_s,
        duration_s=first.duration_s,
        completed=completed,
        inferences=sum(p.window.inferences for p in parts),
        errors=sum(p.window.errors for p in parts),
        infer_per_s=sum(p.window.infer_per_s for p in parts),
        p50_us=float(hist.get_value_at_percentile(50.0)) if completed else 0.0,
        p99_us=float(hist.get_value_at_percentile(99.0)) if completed else 0.0,
        mean_us=sum(p.service_sum_us for p in parts) / completed if completed else 0.0,
    )


@dataclass
class MergedWindows:
    """Every worker's window digests so far, merged window by window."""

    windows: list[Window] = field(default_factory=list)
    level_hists: list[HdrHistogram] = field(default_factory=list)
    level_n: list[int] = field(default_factory=list)
    level_sum_us: list[float] = field(default_factory=list)
    level_sq_sum_us2: list[float] = field(default_factory=list)
    sent: int = 0
    completed: int = 0
    connection_errors: bool = False

    def add(self, parts: Sequence[WindowDigest]) -> Window:
        """Merge one more window (every live worker's digest of it); returns the merged window."""
        window = merge_window(parts)
        self.windows.append(window)
        self.level_hists.append(merge_histograms([p.level_hist for p in parts]))
        self.level_n.append(sum(p.level_n for p in parts))
        self.level_sum_us.append(sum(p.level_sum_us for p in parts))
        self.level_sq_sum_us2.append(sum(p.level_sq_sum_us2 for p in parts))
        self.connection_errors = self.connection_errors or any(p.connection_errors for p in parts)
        return window

    def p_us(self, pct: float) -> float:
        """A percentile of the level's latency over the windows so far (from the merged histogram)."""
        total = HdrHistogram(1, 3_600_000_000, 3)
        for h in self.level_hists:
            total.add(h)
        return float(total.get_value_at_percentile(pct)) if total.get_total_count() else 0.0

    def precision(self, percentile: float | None, closed_loop: bool) -> Precision:
        """The recorder's precision rule, computed from histograms and moments instead of raw samples."""
        windows = self.windows
        n = sum(self.level_n)
        noise = 0.0
        if closed_loop and windows and n >= 2:
            mean = sum(self.level_sum_us) / n
            sd = math.sqrt(max(sum(self.level_sq_sum_us2) / n - mean * mean, 0.0))
            mean_count = float(np.mean([w.completed for w in windows]))
            mean_tput = float(np.mean([w.infer_per_s for w in windows]))
            if mean > 0 and mean_count > 0:
                noise = sd / mean / math.sqrt(mean_count) * mean_tput
        tput = mean_ci_rel([w.infer_per_s for w in windows], min_sd=noise)
        if percentile is None:
            means = [s / c for s, c in zip(self.level_sum_us, self.level_n) if c > 0]
            lat_rel = mean_ci_rel(means)
        else:
            total = HdrHistogram(1, 3_600_000_000, 3)
            for h in self.level_hists:
                total.add(h)
            ci = [_quantile_ci_rel_hist(total, percentile), self._sectioned(percentile)]
            known = [c for c in ci if c is not None]
            lat_rel = max(known) if known else None
        return Precision(throughput_rel=tput, latency_rel=lat_rel, method=PRECISION_METHOD)

    def _sectioned(self, pct: float) -> float | None:
        q = pct / 100
        if len(self.level_hists) < 2 or any(c * (1 - q) < MIN_TAIL_SAMPLES for c in self.level_n):
            return None
        return mean_ci_rel([float(h.get_value_at_percentile(pct)) for h in self.level_hists])


def _value_at_rank(hist: HdrHistogram, rank: int, n: int) -> float:
    # 0-based rank r of n sorted values: the histogram value whose cumulative count reaches r + 1.
    return float(hist.get_value_at_percentile(100.0 * (rank + 1) / n))


def _quantile_ci_rel_hist(hist: HdrHistogram, pct: float) -> float | None:
    """recorder.quantile_ci_rel over a histogram: the same order statistics, read from buckets."""
    n = int(hist.get_total_count())
    return quantile_ci_rel_at(n, pct, lambda rank: _value_at_rank(hist, rank, n))


def summary_from_windows(kind: LatencyKind, parts: Sequence[WindowDigest], *, level: bool) -> LatencySummary:
    """A summary rebuilt from window digests alone (a worker lost before its level digest).

    `level`: from the level-kind histograms (exact moments), else from the window service
    histograms (mean exact, spread from the histogram). Min and max are bucket bounds.
    """
    if level:
        hist = merge_histograms([p.level_hist for p in parts])
        n = sum(p.level_n for p in parts)
        total = sum(p.level_sum_us for p in parts)
        sd = None
        if n:
            mean = total / n
            sd = math.sqrt(max(sum(p.level_sq_sum_us2 for p in parts) / n - mean * mean, 0.0))
    else:
        hist = merge_histograms([p.service_hist for p in parts])
        n = sum(p.window.completed for p in parts)
        total = sum(p.service_sum_us for p in parts)
        sd = float(hist.get_stddev()) if n else None
    if n == 0:
        return LatencySummary(kind, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, _encode(hist), thin_percentiles(0))
    return _summary(
        kind, hist, n, float(hist.get_min_value()), float(hist.get_max_value()), total / n, float(sd or 0.0)
    )

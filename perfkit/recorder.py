"""Recorder: raw samples -> HdrHistograms, windows, level figures, precision.

Attribution rules (documented in docs/concepts/measuring.md):
- a request belongs to the level if it was *due* (open loop) or *sent* (closed loop)
  inside the measurement period; its latency goes into the histograms whenever it
  completes (stragglers are waited for, so the tail is not flattered);
- throughput and windows count completions by *completion time* inside the period.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from hdrh.histogram import HdrHistogram

from perfkit.records import (
    PERCENTILE_OF_METRIC,
    STATUS_DROPPED,
    STATUS_OK,
    STATUS_UNFINISHED,
    LatencyKind,
    LatencySummary,
    LevelCounts,
    Precision,
    Samples,
    Window,
    status_name,
)

HIST_LOWEST_US = 1
HIST_HIGHEST_US = 3_600_000_000  # one hour
HIST_DIGITS = 3
LATE_THRESHOLD_NS = 1_000_000  # a send more than 1 ms after its due time counts as late
PRECISION_METHOD = "batch-means(ar1)/order-statistics+sectioning"
MIN_TAIL_SAMPLES = 10  # a percentile needs this many samples beyond it, else it is flagged thin

_T95_DOF = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 15, 20, 30, 60, 120, 1_000_000)
_T95_Q = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.179, 2.131, 2.086, 2.042, 2.000,
          1.980, 1.960)  # fmt: skip
MAX_LAG1 = 0.9  # caps the variance inflation at (1 + 0.9) / (1 - 0.9) = 19


_T95_ONE_SIDED_Q = (6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812, 1.782, 1.753, 1.725, 1.697,
                    1.671, 1.658, 1.645)  # fmt: skip


def t95_one_sided(dof: float) -> float:
    """One-sided 95% Student t quantile for dof degrees of freedom (an upper bound's factor)."""
    if dof < 1:
        return math.inf
    return float(np.interp(math.log(dof), np.log(_T95_DOF), _T95_ONE_SIDED_Q))


def t95(dof: float) -> float:
    """Two-sided 95% Student t quantile for dof degrees of freedom (fractional dof interpolated)."""
    if dof < 1:
        return math.inf
    return float(np.interp(math.log(dof), np.log(_T95_DOF), _T95_Q))


def lag1_autocorrelation(values: Sequence[float] | np.ndarray) -> float | None:
    """Sample lag-1 autocorrelation of a series, or None below 4 values or with no variance."""
    arr = np.asarray(values, dtype=float)
    if arr.size < 4:
        return None
    d = arr - arr.mean()
    denom = float(d @ d)
    return float(d[:-1] @ d[1:]) / denom if denom > 0 else None


def concat(parts: Sequence[Samples]) -> Samples:
    """Join sample batches (e.g. from several drains or worker processes) exactly."""
    reconnects = sum(p.reconnects for p in parts)
    parts = [p for p in parts if len(p)]
    examples: dict[int, str] = {}
    for p in parts:
        for k, v in p.error_examples.items():
            examples.setdefault(k, v)
    if not parts:
        e = np.empty(0, dtype=np.int64)
        return Samples(e, e, e, np.empty(0, dtype=np.int32), examples, reconnects=reconnects)
    return Samples(
        np.concatenate([p.due_ns for p in parts]),
        np.concatenate([p.sent_ns for p in parts]),
        np.concatenate([p.done_ns for p in parts]),
        np.concatenate([p.status for p in parts]),
        examples,
        response_ns=_concat_responses(parts),
        output_tokens=_concat_tokens(parts),
        input_tokens=_concat_inputs(parts),
        reconnects=reconnects,
        model=None if all(p.model is None for p in parts) else np.concatenate([_models(p) for p in parts]),
    )


def _models(part: Samples) -> np.ndarray:
    return part.model if part.model is not None else np.zeros(len(part), dtype=np.int16)


def _concat_tokens(parts: Sequence[Samples]) -> np.ndarray | None:
    if all(p.output_tokens is None for p in parts):
        return None
    return np.concatenate(
        [p.output_tokens if p.output_tokens is not None else np.zeros(len(p), dtype=np.int64) for p in parts]
    )


def _concat_inputs(parts: Sequence[Samples]) -> np.ndarray | None:
    if all(p.input_tokens is None for p in parts):
        return None
    return np.concatenate(
        [p.input_tokens if p.input_tokens is not None else np.full((len(p), 2), -1, dtype=np.int64) for p in parts]
    )


def _concat_responses(parts: Sequence[Samples]) -> np.ndarray | None:
    # Streamed samples carry per-request response times; a batch without them (unary, or
    # only dropped sends) contributes empty arrays so the lengths stay aligned.
    if all(p.response_ns is None for p in parts):
        return None
    chunks = []
    for p in parts:
        if p.response_ns is not None:
            chunks.append(p.response_ns)
        else:
            empty = np.empty(len(p), dtype=object)
            for i in range(len(p)):
                empty[i] = np.empty(0, dtype=np.int64)
            chunks.append(empty)
    return np.concatenate(chunks)


def histogram_of(values_us: np.ndarray) -> HdrHistogram:
    """An HdrHistogram (1 us .. 1 h, 3 significant digits) of latencies in microseconds."""
    hist = HdrHistogram(HIST_LOWEST_US, HIST_HIGHEST_US, HIST_DIGITS)
    vals = np.clip(np.rint(values_us), HIST_LOWEST_US, HIST_HIGHEST_US).astype(np.int64)
    uniq, counts = np.unique(vals, return_counts=True)
    for v, c in zip(uniq.tolist(), counts.tolist()):
        hist.record_value(v, c)
    return hist


def merge_histograms(encoded: Sequence[str]) -> HdrHistogram:
    """Add encoded histograms together (exact: counts add bucket by bucket)."""
    total = HdrHistogram(HIST_LOWEST_US, HIST_HIGHEST_US, HIST_DIGITS)
    for text in encoded:
        total.add(HdrHistogram.decode(text.encode() if isinstance(text, str) else text))
    return total


_PERCENTILE_NAMES = {pct: name for name, pct in PERCENTILE_OF_METRIC.items()}


def thin_percentiles(count: int) -> tuple[str, ...]:
    """Percentiles that fewer than MIN_TAIL_SAMPLES samples lie beyond."""
    return tuple(name for pct, name in _PERCENTILE_NAMES.items() if count * (100 - pct) / 100 < MIN_TAIL_SAMPLES - 1e-9)


def tails_certified(count: int, percentiles: Sequence[float]) -> bool:
    """Whether `count` latencies put MIN_TAIL_SAMPLES beyond every percentile given (none of them thin)."""
    thin = set(thin_percentiles(count))
    return not any(_PERCENTILE_NAMES.get(float(p), "") in thin for p in percentiles)


def summarize(kind: LatencyKind, values_us: np.ndarray) -> LatencySummary:
    """LatencySummary of one kind from raw latencies (us); percentiles from the histogram."""
    hist = histogram_of(values_us)
    n = int(values_us.size)
    if n == 0:
        return LatencySummary(kind, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, hist.encode().decode(), thin_percentiles(0))
    pct = {p: float(hist.get_value_at_percentile(p)) for p in (50.0, 90.0, 95.0, 99.0, 99.9)}
    return LatencySummary(
        kind=kind,
        count=n,
        min_us=float(values_us.min()),
        max_us=float(values_us.max()),
        mean_us=float(values_us.mean()),
        std_us=float(values_us.std()),
        p50_us=pct[50.0],
        p90_us=pct[90.0],
        p95_us=pct[95.0],
        p99_us=pct[99.0],
        p999_us=pct[99.9],
        histogram=hist.encode().decode(),
        thin=thin_percentiles(n),
    )


def quantile_ci_rel(sorted_us: np.ndarray, pct: float) -> float | None:
    """Relative half-width of a distribution-free ~95% CI of a quantile (order statistics).

    None while fewer than MIN_TAIL_SAMPLES lie beyond the quantile: the interval's upper end
    would be the largest samples, and a level must not be called stable on a thin percentile.
    """
    return quantile_ci_rel_at(sorted_us.size, pct, lambda rank: float(sorted_us[rank]))


def quantile_ci_rel_at(n: int, pct: float, at: Callable[[int], float]) -> float | None:
    """quantile_ci_rel over n ordered values read through at(rank) (an array, a histogram)."""
    q = pct / 100
    if n < 2 or n * (1 - q) < MIN_TAIL_SAMPLES - 1e-9:
        return None
    half = 1.96 * math.sqrt(n * q * (1 - q))
    lo = int(max(0, math.floor(n * q - half) - 1))
    hi = int(min(n - 1, math.ceil(n * q + half)))
    mid = at(min(n - 1, int(n * q)))
    if mid <= 0:
        return None
    return (at(hi) - at(lo)) / 2 / mid


def mean_ci_rel(values: Sequence[float] | np.ndarray, min_sd: float = 0.0) -> float | None:
    """Relative half-width of a ~95% CI of the mean of per-window values (batch means).

    Windows of a drifting server are positively correlated, and a plain t-interval then claims
    far more precision than the run has (75% real coverage at lag-1 correlation 0.5). The
    variance is inflated by the AR(1) factor (1 + r) / (1 - r), r the lag-1 autocorrelation
    (+1/n for its small-sample bias, clamped to [0, 0.9]), and the t quantile taken at the
    effective number of windows n (1 - r) / (1 + r). Below 4 windows r is not estimated.
    `min_sd`: the least per-window standard deviation the data allow (a few nearly equal
    windows must not claim a near-zero interval).
    """
    arr = np.asarray(values, dtype=float)
    n = arr.size
    if n < 2 or arr.mean() <= 0:
        return None
    r = lag1_autocorrelation(arr)
    rho = 0.0 if r is None else min(max(r + 1 / n, 0.0), MAX_LAG1)
    inflation = (1 + rho) / (1 - rho)
    n_eff = max(n / inflation, 2.0)
    sd = max(float(arr.std(ddof=1)), min_sd)
    return float(t95(n_eff - 1) * sd * math.sqrt(inflation / n) / arr.mean())


def sectioned_quantile_ci_rel(sections: Sequence[np.ndarray], pct: float) -> float | None:
    """Relative CI half-width of a quantile from its per-window values (sectioning).

    Order statistics assume independent latencies; under drift they are not, and the
    quantile's spread across windows is the honest measure. None unless every window has
    MIN_TAIL_SAMPLES beyond the quantile (a thinner window's quantile is mostly noise).
    """
    q = pct / 100
    if len(sections) < 2 or any(s.size * (1 - q) < MIN_TAIL_SAMPLES for s in sections):
        return None
    return mean_ci_rel([float(np.percentile(s, pct)) for s in sections])


class LevelRecorder:
    """Accumulates one level's samples and turns them into windows and figures."""

    def __init__(self, *, start_ns: int, window_ns: int, closed_loop: bool, batch_size: int) -> None:
        self.start_ns = start_ns
        self.window_ns = window_ns
        self.closed_loop = closed_loop
        self.batch_size = batch_size
        self._parts: list[Samples] = []
        self._all: Samples | None = None
        self._windows: list[Window] = []
        # count windows (perf_analyzer's count_windows): each window's end, when windows are not
        # all window_ns long; window k runs from the end of window k-1 (start_ns for the first)
        self.ends_ns: list[int] = []

    def window_span(self, k: int) -> tuple[int, int]:
        """Window k's [start, end) in ns (0-based)."""
        if self.ends_ns:
            return (self.ends_ns[k - 1] if k > 0 else self.start_ns), self.ends_ns[k]
        w0 = self.start_ns + k * self.window_ns
        return w0, w0 + self.window_ns

    def window_end(self, count: int) -> int:
        """Where the first `count` windows end."""
        return self.window_span(count - 1)[1] if count > 0 else self.start_ns

    def add(self, samples: Samples) -> None:
        """Add a batch of samples (any order, warm-up ones included: they are filtered)."""
        if len(samples) or samples.error_examples or samples.reconnects:
            self._parts.append(samples)
            self._all = None

    @property
    def samples(self) -> Samples:
        if self._all is None:
            self._all = concat(self._parts)
            self._parts = [self._all]
        return self._all

    def level_mask(self, end_ns: int) -> np.ndarray:
        """Which of self.samples belong to the level ending at end_ns (by send or due time)."""
        return self._in_level(self.samples, end_ns)

    def _in_level(self, s: Samples, end_ns: int) -> np.ndarray:
        t = s.sent_ns if self.closed_loop else s.due_ns
        return (t >= self.start_ns) & (t < end_ns)

    def windows(self, count: int) -> list[Window]:
        """The first `count` full windows, by completion time (a window is final once later ones exist)."""
        s = self.samples
        out = self._windows[: max(0, count - 1)]
        ok = s.status == STATUS_OK
        for k in range(len(out), count):
            w0, w1 = self.window_span(k)
            inw = (s.done_ns >= w0) & (s.done_ns < w1)
            done_ok = inw & ok
            lat = (s.done_ns[done_ok] - s.sent_ns[done_ok]) / 1e3
            n_ok = int(done_ok.sum())
            dur = (w1 - w0) / 1e9
            pct = np.percentile(lat, [50, 90, 95, 99, 99.9]) if lat.size else np.zeros(5)
            out.append(
                Window(
                    start_s=(w0 - self.start_ns) / 1e9,
                    duration_s=dur,
                    completed=n_ok,
                    inferences=n_ok * self.batch_size,
                    errors=int((inw & ~ok).sum()),
                    infer_per_s=n_ok * self.batch_size / dur,
                    p50_us=float(pct[0]),
                    p99_us=float(pct[3]),
                    mean_us=float(lat.mean()) if lat.size else 0.0,
                    p90_us=float(pct[1]),
                    p95_us=float(pct[2]),
                    p999_us=float(pct[4]),
                )
            )
        self._windows = out
        return list(out)

    def _latencies(self, end_ns: int, kind: LatencyKind) -> tuple[np.ndarray, np.ndarray]:
        s = self.samples
        mask = self._in_level(s, end_ns)
        if kind == "service":
            mask &= s.status == STATUS_OK
            return (s.done_ns[mask] - s.sent_ns[mask]) / 1e3, s.done_ns[mask]
        mask &= (s.status == STATUS_OK) | (s.status == STATUS_UNFINISHED)
        return (s.done_ns[mask] - s.due_ns[mask]) / 1e3, s.done_ns[mask]

    def window_latencies_us(self, index: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Latencies (us) of the requests that completed ok in window `index` (0-based): service,
        and corrected (from the due time; None in closed loop)."""
        s = self.samples
        w0, w1 = self.window_span(index)
        done = (s.done_ns >= w0) & (s.done_ns < w1) & (s.status == STATUS_OK)
        service = (s.done_ns[done] - s.sent_ns[done]) / 1e3
        corrected = None if self.closed_loop else (s.done_ns[done] - s.due_ns[done]) / 1e3
        return service, corrected

    def tail_certified(self, end_ns: int, percentiles: Sequence[float]) -> bool:
        """Whether every percentile given has MIN_TAIL_SAMPLES beyond it (none of them thin).

        A level must not stop before this holds for the percentiles a gate will judge:
        a thin percentile is one no comparison can certify.
        """
        count = self.latencies_us(end_ns, "service" if self.closed_loop else "corrected").size
        return tails_certified(count, percentiles)

    def latencies_us(self, end_ns: int, kind: LatencyKind) -> np.ndarray:
        """Latencies of the level's requests: service (ok only) or corrected (ok + unfinished)."""
        return self._latencies(end_ns, kind)[0]

    def precision(self, windows: Sequence[Window], end_ns: int, percentile: float | None) -> Precision:
        """~95% CI half-widths (relative) of throughput and of the chosen latency statistic.

        Throughput: batch means over the windows, widened for their autocorrelation. Mean
        latency: the same over per-window means. A percentile: the wider of the order-statistics
        interval (exact for independent latencies) and the sectioning one (the percentile's
        spread across windows, which sees drift), the latter where each window has the samples.
        """
        lat, done_ns = self._latencies(end_ns, "service" if self.closed_loop else "corrected")
        tput = mean_ci_rel([w.infer_per_s for w in windows], min_sd=self._count_noise_sd(windows, lat))
        count = len(windows)
        if self.ends_ns:
            section = np.searchsorted(np.asarray(self.ends_ns[:count]), done_ns, side="right")
            section[done_ns < self.start_ns] = -1
        else:
            section = (done_ns - self.start_ns) // self.window_ns
        inside = (section >= 0) & (section < count)
        windowed, section = lat[inside], section[inside]  # completed inside the windows
        if percentile is None:  # one O(n) pass: this runs after every window
            n = np.bincount(section, minlength=count)
            sums = np.bincount(section, weights=windowed, minlength=count)
            lat_rel = mean_ci_rel(sums[n > 0] / n[n > 0])
        else:
            order = np.argsort(section, kind="stable")
            sections = np.split(windowed[order], np.cumsum(np.bincount(section, minlength=count))[:-1])
            ci = [quantile_ci_rel(np.sort(lat), percentile), sectioned_quantile_ci_rel(sections, percentile)]
            known = [c for c in ci if c is not None]
            lat_rel = max(known) if known else None
        return Precision(throughput_rel=tput, latency_rel=lat_rel, method=PRECISION_METHOD)

    def _count_noise_sd(self, windows: Sequence[Window], lat_us: np.ndarray) -> float:
        # Closed loop: each connection completes a renewal process of cycles ~ the latency, so a
        # window's count has relative sd >= CV(latency) / sqrt(count) however alike windows look.
        if not self.closed_loop or not windows or lat_us.size < 2 or lat_us.mean() <= 0:
            return 0.0
        mean_count = float(np.mean([w.completed for w in windows]))
        mean_tput = float(np.mean([w.infer_per_s for w in windows]))
        if mean_count <= 0:
            return 0.0
        return float(lat_us.std() / lat_us.mean() / math.sqrt(mean_count) * mean_tput)

    def counts(self, end_ns: int) -> LevelCounts:
        """Request, error, late and dropped counts and send figures over the period."""
        s = self.samples
        mask = self._in_level(s, end_ns)
        status = s.status[mask]
        errors: dict[str, int] = {}
        for code, n in zip(*np.unique(status[status != STATUS_OK], return_counts=True)):
            errors[status_name(int(code))] = int(n)
        period_s = (end_ns - self.start_ns) / 1e9
        in_period = (s.done_ns >= self.start_ns) & (s.done_ns < end_ns)
        ok_done = int((in_period & (s.status == STATUS_OK)).sum())
        sent = s.sent_ns[mask]
        sent = sent[sent >= 0]
        late = 0
        lateness_p99_us = None
        if not self.closed_loop:
            lateness = s.sent_ns[mask] - s.due_ns[mask]
            lateness = lateness[s.sent_ns[mask] >= 0]
            late = int((lateness > LATE_THRESHOLD_NS).sum())
            lateness_p99_us = float(np.percentile(lateness, 99) / 1e3) if lateness.size else None
        per_s = 1 / period_s if period_s > 0 else 0.0
        return LevelCounts(
            request_count=int(mask.sum()),
            inference_count=ok_done * self.batch_size,
            throughput_infer_per_s=ok_done * self.batch_size * per_s,
            sent_rps=sent.size * per_s,
            completed_rps=int(in_period.sum()) * per_s,
            error_count=int((status != STATUS_OK).sum()),
            errors=errors,
            late_count=late,
            dropped_count=int((status == STATUS_DROPPED).sum()),
            send_lateness_p99_us=lateness_p99_us,
        )

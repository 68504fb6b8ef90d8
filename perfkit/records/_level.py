"""What one load level measured: latency summaries, windows, server statistics, shares."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from perfkit.records._load import LatencyKind, LoadLevel
from perfkit.records._openai import WorkloadCheck
from perfkit.records._samples import REJECTED_STATUS_NAMES


@dataclass(frozen=True)
class LatencySummary:
    """Latency figures of one kind over one level, from an HdrHistogram.

    `kind` says what the latency is measured from: 'service' from the send time,
    'corrected' from the time the request was due (coordinated omission corrected).
    `thin` lists the percentiles with too few samples beyond them to be trusted.
    """

    kind: LatencyKind
    count: int
    min_us: float
    max_us: float
    mean_us: float
    std_us: float
    p50_us: float
    p90_us: float
    p95_us: float
    p99_us: float
    p999_us: float
    histogram: str  # HdrHistogram compressed base64 encoding (mergeable)
    thin: tuple[str, ...] = ()

    def percentile_us(self, pct: float) -> float:
        """The summary's value for a standard percentile; raises KeyError for others."""
        key = {50.0: "p50_us", 90.0: "p90_us", 95.0: "p95_us", 99.0: "p99_us", 99.9: "p999_us"}[float(pct)]
        return float(getattr(self, key))


@dataclass(frozen=True)
class Window:
    """One measurement window of a level (requests attributed by completion time)."""

    start_s: float  # from the level's measurement start
    duration_s: float
    completed: int
    inferences: int
    errors: int
    infer_per_s: float
    p50_us: float
    p99_us: float
    mean_us: float
    # Each percentile's own per-window value: the evidence a threshold on that percentile is
    # judged by. None in records written before they were kept (a gate refuses to judge on them).
    p90_us: float | None = None
    p95_us: float | None = None
    p999_us: float | None = None

    def percentile_us(self, pct: float) -> float | None:
        """This window's value of a standard percentile (None when the record did not keep it)."""
        key = {50.0: "p50_us", 90.0: "p90_us", 95.0: "p95_us", 99.0: "p99_us", 99.9: "p999_us"}[float(pct)]
        value = getattr(self, key)
        return None if value is None else float(value)


@dataclass(frozen=True)
class ServerStats:
    """Deltas of Triton's model statistics over a level (averages per request/execution)."""

    model: str
    request_count: int
    execution_count: int
    inference_count: int
    queue_avg_us: float
    compute_input_avg_us: float
    compute_infer_avg_us: float
    compute_output_avg_us: float
    request_avg_us: float
    batch_sizes: dict[str, int] = field(default_factory=dict)  # batch size formed -> executions
    failures: int = 0
    composing: tuple[ServerStats, ...] = ()
    # The response cache (inference_stats cache_hit / cache_miss): requests answered from it, and the
    # lookups that missed (their time is the lookup plus the insert); zero where the cache is off.
    cache_hit_count: int = 0
    cache_hit_avg_us: float = 0.0
    cache_miss_count: int = 0
    cache_miss_avg_us: float = 0.0


@dataclass(frozen=True)
class MetricSample:
    """One scrape of Triton's metrics endpoint (or pynvml), per GPU."""

    t_s: float
    gpu: str
    utilization: float | None = None  # 0..1
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    power_w: float | None = None


@dataclass(frozen=True)
class FirstResponseHistogram:
    """Triton's request-to-first-response histogram of one model over a level: the server's
    `nv_inference_first_response_histogram_ms` (its metrics endpoint, where the server reports
    it), as the change of its cumulative buckets between the scrapes before and at the level's end.

    `bounds_ms` are the buckets' finite upper bounds (Prometheus `le`), `counts` the responses at
    or below each (cumulative); `count` is every response (the +Inf bucket), `sum_ms` their sum.
    """

    model: str
    version: str
    count: int
    sum_ms: float
    bounds_ms: tuple[float, ...] = ()
    counts: tuple[int, ...] = ()


@dataclass(frozen=True)
class Precision:
    """How precisely a level was measured: half-widths of ~95% confidence intervals, relative.

    throughput_rel / latency_rel: within the run (what more windows shrink; what a level's stopping
    rule asks for). The *_rerun_rel pair: the same with the machine's between-run spread added
    (what another run of the level on the same machine is expected to agree within, as measured
    by benchmarks/stopping_and_drift.py); None in records made before it was stated.
    """

    throughput_rel: float | None
    latency_rel: float | None
    method: str = "batch-means"
    throughput_rerun_rel: float | None = None
    latency_rerun_rel: float | None = None


@dataclass(frozen=True)
class Drift:
    """The level's own figures moved across its windows (a change point or a trend): the machine or
    server changed under the load, so more windows could not make the level more precise."""

    metric: str  # "throughput", "mean" or a percentile ("p99")
    at_window: int  # the first window after the change (0-based)
    before: float  # the metric's mean over the windows before the change
    after: float  # ... and after it
    p_value: float  # the test's (the split's or the slope's)
    kind: str = "shift"  # "shift": a change point at at_window; "trend": a steady slope (before/after: fitted ends)

    @property
    def rel_change(self) -> float:
        """after / before - 1."""
        return self.after / self.before - 1.0 if self.before else 0.0


@dataclass(frozen=True)
class StreamWindow:
    """Streaming figures of one measurement window (requests attributed by completion time)."""

    ttft_p50_us: float
    ttft_p99_us: float
    itl_p50_us: float
    itl_p99_us: float
    output_tokens_per_s: float


@dataclass(frozen=True)
class StreamingSummary:
    """Per-response figures of a level of streamed requests (one response per token).

    ttft: first non-empty response from the send time; ttft_corrected (open loop): from
    the time the request was due. itl: every gap between consecutive non-empty responses
    of a request (a distribution over responses, not per-request means). second_token:
    from the first to the second response. output_len_*: output tokens per request (non-empty
    responses, or the elements of a declared output tensor).
    goodput counts requests
    meeting every SLO in goodput_slo_ms (keys 'ttft', 'itl', 'latency'; a request's
    worst ITL gap is held against 'itl').
    """

    ttft: LatencySummary
    itl: LatencySummary
    second_token: LatencySummary
    output_len_mean: float
    output_len_p50: float
    output_len_p99: float
    output_len_max: int
    responses_per_s: float
    output_tokens_per_s: float
    request_count: int
    ttft_corrected: LatencySummary | None = None
    goodput_slo_ms: dict[str, float] = field(default_factory=dict)
    goodput_rps: float | None = None
    goodput_fraction: float | None = None
    windows: tuple[StreamWindow, ...] = ()  # per window, for gates' significance tests
    # per request: (latency - ttft) / (output tokens - 1), requests of two tokens or more; None in older records
    tpot: LatencySummary | None = None
    # the mean over requests of their output tokens after the first per second after the first (1 / the
    # request's TPOT: AIPerf's output token throughput per user); None in older records
    output_tokens_per_s_per_user: float | None = None
    input_len_mean: float | None = None  # input tokens per request where the server reported them


@dataclass(frozen=True)
class LevelCounts:
    """Counts and rates over a level's measurement period: a LevelResult's, and what live exporters read mid-level."""

    request_count: int
    inference_count: int
    throughput_infer_per_s: float
    sent_rps: float
    completed_rps: float
    error_count: int
    errors: dict[str, int]
    late_count: int
    dropped_count: int
    send_lateness_p99_us: float | None

    @property
    def rejected_count(self) -> int:
        """Requests the server refused to run (UNAVAILABLE: a full queue, a queue timeout under
        REJECT), counted among error_count (see REJECTED_STATUS_NAMES)."""
        return sum(n for name, n in self.errors.items() if name in REJECTED_STATUS_NAMES)

    @property
    def error_rate(self) -> float:
        """Failed requests over the requests of the period (0 when none was sent)."""
        return self.error_count / self.request_count if self.request_count else 0.0

    @property
    def rejection_rate(self) -> float:
        """Rejected requests (rejected_count) over the requests of the period."""
        return self.rejected_count / self.request_count if self.request_count else 0.0


@dataclass(frozen=True)
class _LevelHead:
    """A LevelResult's fields before its counts: a base of its own so that the saved JSON keeps its key order."""

    load: LoadLevel
    batch_size: int
    stable: bool
    precision: Precision
    duration_s: float


# The bases' fields come first, _LevelHead's then LevelCounts' (dataclasses collect them in reverse MRO order).
@dataclass(frozen=True)
class LevelResult(LevelCounts, _LevelHead):
    """Everything measured at one load level."""

    service: LatencySummary
    corrected: LatencySummary | None
    windows: tuple[Window, ...]
    server: ServerStats | None = None
    metrics: tuple[MetricSample, ...] = ()
    note: str = ""
    # Distributed runs (perfkit.distributed) only; empty for one client machine.
    fleet: tuple[ServerShare, ...] = ()  # per-server breakdown when load went to several servers
    workers: tuple[WorkerShare, ...] = ()  # per load worker: its share, clock offset, fate
    incomplete: bool = False  # a worker died mid-level: figures hold what the others (and it, before) sent
    streaming: StreamingSummary | None = None  # streamed (decoupled) requests only
    reconnects: int = 0  # connections that died during the level and were replaced
    # A traffic mix (ProfileSpec.mix): each model's own figures, its requests only; the level's
    # own figures are the whole mix's (its counts are their sums)
    models: tuple[MixShare, ...] = ()
    drift: Drift | None = None  # the level ended early: its windows moved (a change point), all kept
    # Triton's first-response histogram per model (--collect-metrics, servers that report it); () before it was read
    first_response: tuple[FirstResponseHistogram, ...] = ()
    # an OpenAI-compatible endpoint (ProfileSpec.openai): what was sent against what the server reported
    workload: WorkloadCheck | None = None

    def latency(self, kind: LatencyKind | None = None) -> LatencySummary:
        """The corrected latency where measured (open loop), else service; or the kind asked."""
        if kind == "service":
            return self.service
        if kind == "corrected":
            if self.corrected is None:
                raise KeyError("no corrected latency in a closed-loop level")
            return self.corrected
        return self.corrected or self.service


@dataclass(frozen=True)
class MixShare:
    """One model's part of a mixed level: its weight in the mix and its figures (a LevelResult of its requests)."""

    model: str
    weight: int
    result: LevelResult


@dataclass(frozen=True)
class ServerShare:
    """One server's part of a level measured against a fleet (requests it was sent, its latencies)."""

    url: str
    request_count: int
    inference_count: int
    throughput_infer_per_s: float
    error_count: int
    late_count: int
    dropped_count: int
    service: LatencySummary
    corrected: LatencySummary | None = None
    server: ServerStats | None = None


@dataclass(frozen=True)
class WorkerShare:
    """One distributed load worker's part of a level, and how well its clock was tied to the coordinator's.

    clock_offset_ns: the worker's monotonic clock minus the coordinator's (applied to its
    schedule and windows); clock_uncertainty_ns: half the smallest round trip it was measured with.
    status: 'ok', or 'died' (its results up to its last report are kept).
    """

    worker: int
    node: str
    servers: tuple[str, ...]
    request_count: int
    error_count: int
    late_count: int
    dropped_count: int
    clock_offset_ns: int
    clock_uncertainty_ns: int
    status: Literal["ok", "died"] = "ok"
    note: str = ""
    cpu_s: float = 0.0  # CPU time the worker's process used over the level
    max_rss_bytes: int = 0  # the worker process's peak resident memory
    digest_bytes: int = 0  # what it sent the coordinator for the level (pickled digests)

"""The shared vocabulary: frozen dataclasses for what flows between stages.

A RunRecord is the unit of truth: everything a report or a gate needs, saved as
one versioned JSON file. This module is a leaf: it imports nothing from perfkit
except errors.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from perfkit.errors import InputError

RUN_SCHEMA = "perfkit.run"
RUN_SCHEMA_VERSION = 1

LoadMode = Literal["concurrency", "request_rate", "custom_intervals"]
LatencyKind = Literal["service", "corrected"]
PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9)


@dataclass(frozen=True)
class LoadLevel:
    """One load level: concurrency N, or a request rate (constant/poisson), or an intervals file."""

    mode: LoadMode
    value: float  # concurrency (integral) or target rate in requests/s
    distribution: Literal["constant", "poisson"] | None = None

    @property
    def label(self) -> str:
        if self.mode == "concurrency":
            return f"concurrency {int(self.value)}"
        if self.mode == "request_rate":
            return f"{self.value:g} req/s {self.distribution or 'constant'}"
        return f"custom intervals ({self.value:g} req/s mean)"


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
class Precision:
    """How precisely a level was measured: half-widths of ~95% confidence intervals, relative."""

    throughput_rel: float | None
    latency_rel: float | None
    method: str = "batch-means"


@dataclass(frozen=True)
class LevelResult:
    """Everything measured at one load level."""

    load: LoadLevel
    batch_size: int
    stable: bool
    precision: Precision
    duration_s: float
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
    service: LatencySummary
    corrected: LatencySummary | None
    windows: tuple[Window, ...]
    server: ServerStats | None = None
    metrics: tuple[MetricSample, ...] = ()
    note: str = ""
    reconnects: int = 0  # connections that died during the level and were replaced

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
class RunRecord:
    """One profile run: spec, what was served, where, and what was measured."""

    perfkit_version: str
    created_utc: str
    command: tuple[str, ...]
    machine: dict[str, Any]
    server: dict[str, Any]  # version, url, protocol, launch mode
    model: dict[str, Any]  # name, version, config (as served, JSON), config_sha256
    spec: dict[str, Any]  # the full measurement spec
    levels: tuple[LevelResult, ...]
    status: Literal["ok", "failed", "interrupted"] = "ok"
    error: str | None = None
    schema: str = RUN_SCHEMA
    schema_version: int = RUN_SCHEMA_VERSION

    def to_json(self) -> str:
        """Serialize to JSON text."""
        return json.dumps(to_dict(self), indent=1, sort_keys=False)

    def save(self, path: Path) -> Path:
        """Write atomically (temp file then rename); returns path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(self.to_json())
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: Path) -> RunRecord:
        """Read a run record file; raises InputError naming the file and what is wrong."""
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise InputError(f"run record {path} does not exist") from None
        except (OSError, ValueError) as err:
            raise InputError(f"run record {path} is not readable JSON: {err}") from None
        return cls.from_dict(data, source=str(path))

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<run record>") -> RunRecord:
        """Build from parsed JSON; raises InputError on another schema or version."""
        if not isinstance(data, dict) or data.get("schema") != RUN_SCHEMA:
            raise InputError(f"{source} is not a perfkit run record (field 'schema' is not {RUN_SCHEMA!r})")
        version = data.get("schema_version")
        if version != RUN_SCHEMA_VERSION:
            raise InputError(
                f"{source} has schema_version {version!r}; this perfkit reads version {RUN_SCHEMA_VERSION}",
                hint="re-run the profile with this perfkit version",
            )
        try:
            return from_dict(cls, data)
        except (TypeError, KeyError, ValueError) as err:
            raise InputError(f"{source} is a malformed run record: {err}") from None


T = TypeVar("T")


def to_dict(obj: Any) -> Any:
    """Dataclasses (recursively) to JSON-ready dicts/lists."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    return obj


def from_dict(cls: type[T], data: Any) -> T:
    """Inverse of to_dict for the dataclasses of this module; raises TypeError/KeyError."""
    return typing.cast(T, _decode(cls, data))


def _decode(tp: Any, value: Any) -> Any:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(value, dict):
            raise TypeError(f"{tp.__name__} expects an object, got {type(value).__name__}")
        hints = typing.get_type_hints(tp)
        kwargs = {}
        for f in dataclasses.fields(tp):
            if f.name in value:
                kwargs[f.name] = _decode(hints[f.name], value[f.name])
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise KeyError(f"{tp.__name__}.{f.name} is missing")
        return tp(**kwargs)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        non_none = [a for a in args if a is not type(None)]
        return _decode(non_none[0], value) if len(non_none) == 1 else value
    if origin is tuple:
        args = typing.get_args(tp)
        return tuple(_decode(args[0], v) for v in value) if args else tuple(value)
    if origin is list:
        return [_decode(typing.get_args(tp)[0], v) for v in value]
    if origin is dict:
        _, vt = typing.get_args(tp)
        return {k: _decode(vt, v) for k, v in value.items()}
    return value


TUNE_SCHEMA = "perfkit.tune"
TUNE_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class TrialRecord:
    """One tuner trial: the candidate's parameters and what it achieved within the budget."""

    number: int
    state: Literal["complete", "pruned", "failed", "running"]
    params: dict[str, Any]  # e.g. max_batch_size, dynamic_batching, max_queue_delay_us, instance_count, precision
    load: LoadLevel | None  # the highest load level whose percentile met the budget
    throughput_infer_per_s: float | None
    latency_us: float | None  # the budget percentile at that load
    feasible: bool
    fail_reason: str = ""
    config_sha256: str = ""
    duration_s: float = 0.0
    is_original: bool = False
    metrics: dict[str, float] = field(default_factory=dict)  # every other figure, e.g. gpu_memory_bytes


@dataclass(frozen=True)
class TuneRecord:
    """A whole tune run: the budget, every trial, the recommendation. Saved as tune.json."""

    perfkit_version: str
    created_utc: str
    command: tuple[str, ...]
    machine: dict[str, Any]
    server: dict[str, Any]
    model: str
    latency_budget_ms: float
    percentile: float
    objective: Literal["throughput", "pareto"]
    original_config: str  # config.pbtxt text, byte for byte
    best_config: str | None  # config.pbtxt text of the recommendation
    best_trial: int | None
    trials: tuple[TrialRecord, ...]
    pareto_trials: tuple[int, ...] = ()
    importances: dict[str, float] = field(default_factory=dict)
    status: Literal["ok", "failed", "interrupted"] = "ok"
    error: str | None = None
    schema: str = TUNE_SCHEMA
    schema_version: int = TUNE_SCHEMA_VERSION


@dataclass(frozen=True)
class ProfileSpec:
    """What to measure and how: perf_analyzer's knobs under perfkit's names.

    Stability: a level ends once the ~95% confidence half-widths of throughput and of
    the chosen percentile are within stability_percentage (relative), after at least
    min_windows windows; or after max_trials windows, flagged unstable.
    """

    model: str
    levels: tuple[LoadLevel, ...]
    model_version: str = ""
    protocol: Literal["http", "grpc"] = "http"
    batch_size: int = 1
    input_data: str = "random"  # "random", "zero", or a perf_analyzer-format JSON file path
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    string_length: int = 128
    shared_memory: Literal["none", "system", "cuda"] = "none"
    output_shared_memory_size: int = 102400
    measurement_interval_ms: float = 1000.0  # window length
    stability_percentage: float = 10.0
    max_trials: int = 10  # max windows per level
    min_windows: int = 3
    percentile: float | None = None  # None: stability and thresholds on the average latency
    latency_threshold_ms: float | None = None  # stop the sweep past this latency
    binary_search: bool = False
    warmup_request_count: int = 0
    warmup_s: float = 0.5
    collect_metrics: bool = False
    metrics_url: str | None = None
    metrics_interval_ms: float = 1000.0
    request_intervals_file: str | None = None
    seed: int = 0
    workers: int = 1  # load-generator processes
    max_outstanding: int = 4096  # open loop: cap on requests in flight before sends count as dropped


# Request outcome codes shared by the load generator and the recorder.
# 0 is success; HTTP errors keep their status code (400..599); gRPC errors are 1000 + status
# code; negative codes are client-side outcomes.
STATUS_OK = 0
STATUS_CONNECTION_CLOSED = -1
STATUS_CONNECTION_REFUSED = -2
STATUS_DROPPED = -3  # open loop: could not be sent (max outstanding reached)
STATUS_UNFINISHED = -4  # still in flight when the level's drain timeout ran out
STATUS_PROTOCOL = -5  # a response perfkit could not parse
GRPC_STATUS_BASE = 1000
_CLIENT_STATUS_NAMES = {
    STATUS_CONNECTION_CLOSED: "connection_closed",
    STATUS_CONNECTION_REFUSED: "connection_refused",
    STATUS_DROPPED: "dropped",
    STATUS_UNFINISHED: "unfinished",
    STATUS_PROTOCOL: "protocol_error",
}


def status_name(code: int) -> str:
    """Human name of an outcome code: 'http_503', 'grpc_14', 'dropped'..."""
    if code in _CLIENT_STATUS_NAMES:
        return _CLIENT_STATUS_NAMES[code]
    if code >= GRPC_STATUS_BASE:
        return f"grpc_{code - GRPC_STATUS_BASE}"
    return f"http_{code}"


@dataclass(frozen=True)
class Samples:
    """Raw per-request timestamps (one monotonic clock, ns) from the load generator.

    due_ns is -1 in closed loop; sent_ns is -1 for dropped sends. Arrays are numpy int64
    (status int32), all of one length.
    """

    due_ns: Any
    sent_ns: Any
    done_ns: Any
    status: Any
    error_examples: dict[int, str] = field(default_factory=dict)
    reconnects: int = 0  # connections that died under the load generator and were replaced

    def __len__(self) -> int:
        return len(self.done_ns)

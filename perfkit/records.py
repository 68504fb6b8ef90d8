"""The shared vocabulary: frozen dataclasses for what flows between stages.

A RunRecord is the unit of truth: everything a report or a gate needs, saved as
one versioned JSON file. This module is a leaf: it imports nothing from perfkit
except errors.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from perfkit.errors import InputError

RUN_SCHEMA = "perfkit.run"
RUN_SCHEMA_VERSION = 2  # 2: typed machine, server, model and spec; model.served_config_sha256

LoadMode = Literal["concurrency", "request_rate", "custom_intervals", "trace"]
LatencyKind = Literal["service", "corrected"]
PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9)
PERCENTILE_OF_METRIC = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "p999": 99.9}

# What `perfkit gate` judges when no --threshold is given. Defined here, not in the gate,
# because the measurement must know it too: a level measured with default settings keeps
# going until every percentile judged by default can be certified (see ProfileSpec).
DEFAULT_GATE_THRESHOLDS = ("throughput:-5%", "p99:+10%")
DEFAULT_MIN_WINDOWS = 3  # fewest windows a level is measured over, and a gate judges noise from
DEFAULT_TAIL_PERCENTILES = tuple(
    PERCENTILE_OF_METRIC[t.split(":")[0]] for t in DEFAULT_GATE_THRESHOLDS if t.split(":")[0] in PERCENTILE_OF_METRIC
)


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
        if self.mode == "trace":
            return f"trace replay ({self.value:.4g} req/s mean)"
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


# Machine fields that identify hardware (hostnames change per CI job: not among them).
HARDWARE_FIELDS = ("arch", "cpu_model", "cpu_count", "memory_total_bytes", "gpus")
# Names older records used for those fields.
_MACHINE_ALIASES = {
    "cpu": "cpu_model",
    "logical_cpus": "cpu_count",
    "memory_bytes": "memory_total_bytes",
    "gpu": "gpus",
    "gpu_names": "gpus",
    "gpu_models": "gpus",
    "machine": "arch",
    "os": "platform",
}


@dataclass(frozen=True)
class Machine:
    """The client machine a run was measured on: enough to refuse comparing different hardware."""

    hostname: str = ""
    platform: str = ""
    python: str = ""
    arch: str = ""
    cpu_model: str = ""
    cpu_count: int | None = None
    memory_total_bytes: int | None = None
    gpus: tuple[str, ...] | None = None  # None: not known; (): none found

    def differences(self, other: Machine) -> list[str]:
        """The rule for "same machine", in one place: the hardware fields known on both sides that differ.

        The hostname counts only when no hardware field is known on both sides (CI runners of
        one kind have new hostnames per job).
        """
        both = [k for k in HARDWARE_FIELDS if _known(getattr(self, k)) and _known(getattr(other, k))]
        keys = both or (["hostname"] if self.hostname and other.hostname else [])
        return [
            f"{k} {getattr(self, k)!r} vs {getattr(other, k)!r}" for k in keys if getattr(self, k) != getattr(other, k)
        ]

    def identity(self) -> str:
        """A short key of the hardware (for a results store's index): hostname, then the hardware fields."""
        hardware = ",".join(f"{k}={getattr(self, k)}" for k in HARDWARE_FIELDS if _known(getattr(self, k)))
        return f"{self.hostname}:{hardware}"

    @classmethod
    def from_mapping(cls, data: Any) -> Machine:
        """From a record's machine object, of this shape or an older one (aliases read, other keys ignored)."""
        if isinstance(data, Machine):
            return data
        if not isinstance(data, dict):
            raise TypeError(f"machine must be an object, got {type(data).__name__}")
        values: dict[str, Any] = {}
        for key, value in data.items():
            name = _MACHINE_ALIASES.get(key, key)
            if name in _MACHINE_FIELD_NAMES and value is not None and name not in values:
                values[name] = value
        if "gpus" in values:
            gpus = values["gpus"]
            values["gpus"] = tuple(str(g) for g in gpus) if isinstance(gpus, (list, tuple)) else (str(gpus),)
        for key in ("cpu_count", "memory_total_bytes"):
            if key in values:
                values[key] = int(values[key])
        return cls(**values)


def _known(value: Any) -> bool:
    return value is not None and value != ""


@dataclass(frozen=True)
class ServerInfo:
    """The server a run measured: its version, launch mode, the protocol used and its URLs."""

    version: str = ""
    mode: str = ""  # local, docker, remote
    protocol: str = ""  # http or grpc: what the load was sent over
    http_url: str | None = None
    grpc_url: str | None = None
    metrics_url: str | None = None

    @classmethod
    def from_mapping(cls, data: Any) -> ServerInfo:
        """From a record's server object (older records: extra keys ignored, 'url' and 'launch_mode' read)."""
        if isinstance(data, ServerInfo):
            return data
        if not isinstance(data, dict):
            raise TypeError(f"server must be an object, got {type(data).__name__}")
        values = {k: data[k] for k in _SERVER_FIELD_NAMES if data.get(k) is not None}
        if "http_url" not in values and data.get("url"):
            values["http_url"] = data["url"]
        if "mode" not in values and data.get("launch_mode"):
            values["mode"] = data["launch_mode"]
        return cls(**{k: str(v) for k, v in values.items()})


@dataclass(frozen=True)
class ModelInfo:
    """The model measured and the config the server applied (as the server reports it, JSON)."""

    name: str
    version: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    # sha256 of the served config's JSON (keys sorted): what the server ran. Not the hash of a
    # config.pbtxt file (the tuner's config_pbtxt_sha256): the same config gives two different hashes.
    served_config_sha256: str = ""

    @classmethod
    def from_mapping(cls, data: Any) -> ModelInfo:
        """From a record's model object; older records stored the hash under 'config_sha256'."""
        if isinstance(data, ModelInfo):
            return data
        if not isinstance(data, dict):
            raise TypeError(f"model must be an object, got {type(data).__name__}")
        return cls(
            name=str(data["name"]),
            version=str(data.get("version") or ""),
            config=dict(data.get("config") or {}),
            served_config_sha256=str(data.get("served_config_sha256") or data.get("config_sha256") or ""),
        )


_MACHINE_FIELD_NAMES = {f.name for f in dataclasses.fields(Machine)}
_SERVER_FIELD_NAMES = {f.name for f in dataclasses.fields(ServerInfo)}


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


@dataclass(frozen=True)
class RunRecord:
    """One profile run: spec, what was served, where, and what was measured."""

    perfkit_version: str
    created_utc: str
    command: tuple[str, ...]
    machine: Machine
    server: ServerInfo
    model: ModelInfo
    spec: ProfileSpec  # the full measurement spec
    levels: tuple[LevelResult, ...]
    status: Literal["ok", "failed", "interrupted"] = "ok"
    error: str | None = None
    # Distributed runs only: Ray address, nodes, workers and their clock offsets, the fleet's URLs.
    distributed: dict[str, Any] = field(default_factory=dict)
    schema: str = RUN_SCHEMA
    schema_version: int = RUN_SCHEMA_VERSION

    def to_json(self) -> str:
        """Serialize to JSON text."""
        return json.dumps(to_dict(self), indent=1, sort_keys=False)

    def save(self, path: Path) -> Path:
        """Write atomically (temp file then rename); returns path."""
        return _save_json(to_dict(self), Path(path))

    @classmethod
    def load(cls, path: Path) -> RunRecord:
        """Read a run record file; raises InputError naming the file and what is wrong."""
        return cls.from_dict(_read_json(Path(path), "run record"), source=str(path))

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<run record>") -> RunRecord:
        """Build from parsed JSON; raises InputError on another schema or version."""
        if not isinstance(data, dict) or data.get("schema") != RUN_SCHEMA:
            raise InputError(f"{source} is not a perfkit run record (field 'schema' is not {RUN_SCHEMA!r})")
        version = data.get("schema_version")
        if version not in (1, RUN_SCHEMA_VERSION):
            raise InputError(
                f"{source} has schema_version {version!r}; this perfkit reads versions 1 to {RUN_SCHEMA_VERSION}",
                hint="read it with the perfkit version that wrote it, or re-run the profile with this one",
            )
        try:
            if version == 1:
                data = _run_v1_to_v2(data)
            return from_dict(cls, data)
        except (TypeError, KeyError, ValueError) as err:
            raise InputError(f"{source} is a malformed run record: {err}") from None


def _run_v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    """A version-1 run record (machine, server, model, spec as free-form objects) in version 2's shape."""
    out = dict(data, schema_version=RUN_SCHEMA_VERSION)
    model = out.get("model") or {}
    spec = dict(out.get("spec") or {})
    known = {f.name for f in dataclasses.fields(ProfileSpec)}
    spec = {k: v for k, v in spec.items() if k in known}
    spec.setdefault("model", model.get("name", ""))
    spec.setdefault("levels", [lv.get("load") for lv in out.get("levels") or [] if isinstance(lv, dict)])
    out["spec"] = spec
    return out


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
    if tp in (Machine, ServerInfo, ModelInfo):
        return tp.from_mapping(value)
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
class Confirmation:
    """A candidate re-measured before its figure is claimed (perfkit.tuner's confirmation step).

    The search reads each level once, in short windows; the claim is re-measured at its load in
    `repeats` longer runs. It holds when every repeat's percentile is within the budget; when the
    search's load fails, the next load down is confirmed instead (stepped_down). Not held: the
    candidate is demoted and never recommended.
    """

    held: bool
    load: LoadLevel  # the load the figures below were measured at
    repeats: int
    throughput_infer_per_s: float  # mean over the repeats: the claimed figure
    throughput_low: float  # ~95% interval of that mean (Student t over the repeats)
    throughput_high: float
    latency_us: float  # the worst repeat's percentile (what "held" is judged by)
    latency_ucb_us: float  # upper ~95% bound of the percentile (worst repeat's CI upper end)
    searched_load: LoadLevel | None = None  # the search's load, when the claim stepped down from it
    note: str = ""

    @property
    def stepped_down(self) -> bool:
        return self.searched_load is not None


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
    config_pbtxt_sha256: str = ""  # of the candidate config.pbtxt as perfkit wrote it (canonical protobuf)
    served_config_sha256: str = ""  # of the config the server applied (ModelInfo.served_config_sha256 of its run)
    duration_s: float = 0.0
    is_original: bool = False
    metrics: dict[str, float] = field(default_factory=dict)  # every other figure, e.g. gpu_memory_bytes
    confirmation: Confirmation | None = None  # the re-measurement of a pick and its nearest rivals

    @property
    def claimed_throughput(self) -> float | None:
        """The figure this trial stands for: the confirmed one where confirmed, else the search's."""
        if self.confirmation is not None:
            return self.confirmation.throughput_infer_per_s if self.confirmation.held else None
        return self.throughput_infer_per_s


@dataclass(frozen=True)
class TuneRecord:
    """A whole tune run: the budget, every trial, the recommendation. Saved as tune.json."""

    perfkit_version: str
    created_utc: str
    command: tuple[str, ...]
    machine: Machine  # older tune records' free-form machine objects are read by Machine.from_mapping
    server: dict[str, Any]
    model: str
    latency_budget_ms: float
    percentile: float
    objective: Literal["throughput", "pareto", "per-instance", "per-gpu", "goodput"]
    original_config: str  # config.pbtxt text, byte for byte
    best_config: str | None  # config.pbtxt text of the recommendation
    best_trial: int | None
    trials: tuple[TrialRecord, ...]
    pareto_trials: tuple[int, ...] = ()
    importances: dict[str, float] = field(default_factory=dict)
    status: Literal["ok", "failed", "interrupted"] = "ok"
    error: str | None = None
    # What latency_budget_ms holds at the percentile: "latency" (end-to-end request latency; what
    # records before this field meant), "ttft" or "itl" (a decoupled model's stream). Trials'
    # latency_us are that metric's percentile.
    budget_metric: str = "latency"
    # A traffic mix tuned jointly: its models (model is the first) and weights, and each model's
    # budget (latency_budget_ms is the first's; trials' latency_us the worst model's percentile
    # scaled to it). Empty for one model.
    mix: tuple[tuple[str, int], ...] = ()
    mix_budgets_ms: dict[str, float] = field(default_factory=dict)
    schema: str = TUNE_SCHEMA
    schema_version: int = TUNE_SCHEMA_VERSION

    def trial(self, number: int | None) -> TrialRecord | None:
        """The trial of that number, if any."""
        return next((t for t in self.trials if t.number == number), None) if number is not None else None

    def best(self) -> TrialRecord | None:
        """The recommendation: the complete, feasible trial with the most throughput.

        Ties go to the lower latency, then the earlier trial. None when no trial is feasible: an
        infeasible config is never recommended, whatever its throughput.
        """
        ok = [t for t in self.trials if t.state == "complete" and t.feasible and t.throughput_infer_per_s is not None]
        confirmed = [t for t in ok if t.confirmation is not None]
        if confirmed:
            # Confirmed picks only: one whose confirmation failed is demoted, and an unconfirmed
            # trial ranked below the confirmed ones by the search's own reading.
            ok = [t for t in confirmed if t.confirmation is not None and t.confirmation.held]
        if not ok:
            return None
        # per-instance / per-gpu: throughput over the hardware the config occupies (kept in metrics)
        per = self.objective in ("per-instance", "per-gpu")

        def value(t: TrialRecord) -> float:
            if self.objective == "goodput":  # streamed requests meeting every SLO per second
                return t.metrics.get("goodput_rps", 0.0)
            return (t.claimed_throughput or 0.0) / (t.metrics.get("hardware_units", 1.0) if per else 1.0)

        return max(ok, key=lambda t: (value(t), -(t.latency_us or math.inf), -t.number))

    def original(self) -> TrialRecord | None:
        """The trial that measured the user's original config (a complete one first)."""
        originals = [t for t in self.trials if t.is_original]
        return next((t for t in originals if t.state == "complete"), None) or next(iter(originals), None)

    def pareto(self) -> list[TrialRecord]:
        """Feasible complete trials no other dominates on throughput (up) and latency (down), by throughput."""
        ok = [
            t
            for t in self.trials
            if t.state == "complete"
            and t.feasible
            and t.throughput_infer_per_s is not None
            and t.latency_us is not None
        ]

        def dominates(a: TrialRecord, b: TrialRecord) -> bool:
            at, bt, al, bl = (
                a.throughput_infer_per_s or 0,
                b.throughput_infer_per_s or 0,
                a.latency_us or 0,
                b.latency_us or 0,
            )
            return at >= bt and al <= bl and (at > bt or al < bl)

        front = [t for t in ok if not any(dominates(o, t) for o in ok)]
        return sorted(front, key=lambda t: t.throughput_infer_per_s or 0.0)

    def save(self, path: Path) -> Path:
        """Write atomically (temp file then rename); returns path."""
        return _save_json(to_dict(self), Path(path))

    @classmethod
    def load(cls, path: Path) -> TuneRecord:
        """Read a tune.json; raises InputError naming the file and what is wrong."""
        return cls.from_dict(_read_json(Path(path), "tune record"), source=str(path))

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<tune record>") -> TuneRecord:
        """Build from parsed JSON; raises InputError on another schema or version or a malformed record."""
        if not isinstance(data, dict) or data.get("schema") != TUNE_SCHEMA:
            raise InputError(f"{source} is not a perfkit tune record (field 'schema' is not {TUNE_SCHEMA!r})")
        if data.get("schema_version") != TUNE_SCHEMA_VERSION:
            raise InputError(
                f"{source} has schema_version {data.get('schema_version')!r}; this perfkit reads version "
                f"{TUNE_SCHEMA_VERSION}",
                hint="read it with the perfkit version that wrote it",
            )
        trials = data.get("trials")
        if isinstance(trials, list):  # records before the hashes were named for what they hash
            data = {**data, "trials": [_renamed_key(t, "config_sha256", "config_pbtxt_sha256") for t in trials]}
        try:
            return from_dict(cls, data)
        except (TypeError, KeyError, ValueError) as err:
            raise InputError(f"{source} is a malformed tune record: {err}") from None


def _renamed_key(obj: Any, old: str, new: str) -> Any:
    if isinstance(obj, dict) and old in obj and new not in obj:
        return {(new if k == old else k): v for k, v in obj.items()}
    return obj


def load_record(path: Path) -> RunRecord | TuneRecord:
    """Read a run record or a tune record, whichever the file is; raises InputError otherwise."""
    path = Path(path)
    data = _read_json(path, "record")
    schema = data.get("schema") if isinstance(data, dict) else None
    if schema == TUNE_SCHEMA:
        return TuneRecord.from_dict(data, source=str(path))
    if schema == RUN_SCHEMA:
        return RunRecord.from_dict(data, source=str(path))
    raise InputError(
        f"{path} is neither a perfkit run record nor a tune record (field 'schema' is {schema!r})",
        hint="give files written by 'perfkit profile -o' or folders written by 'perfkit tune -o'",
    )


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{what} {path} does not exist") from None
    except (OSError, ValueError) as err:
        raise InputError(f"{what} {path} is not readable JSON: {err}") from None


def _save_json(data: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=False))
    tmp.replace(path)
    return path


@dataclass(frozen=True)
class TlsSpec:
    """TLS toward the server (perf_analyzer's --ssl-https-* / --ssl-grpc-* flags); PEM files by path.

    ca_file None: the system's trusted CAs. cert_file/key_file: a client certificate (mutual TLS).
    """

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify_peer: bool = True  # check the server's certificate chain
    verify_host: bool = True  # check that the certificate names the host connected to


@dataclass(frozen=True)
class ProfileSpec:
    """What to measure and how: perf_analyzer's knobs under perfkit's names.

    Stability: a level ends once the ~95% confidence half-widths of throughput and of
    the chosen percentile are within stability_percentage (relative), after at least
    min_windows windows, and every percentile in tail_percentiles has enough samples beyond
    it to be certified (by default those the gate judges by default); or after max_trials
    windows, flagged unstable; or, after min_windows and at least 5 windows, as soon as the
    windows drift (a change point larger than the precision asked: LevelResult.drift); or
    once level_budget_s is spent and tail_percentiles have their samples, flagged unstable.

    These field defaults are perfkit's defaults: the CLI's flags and sweep files read them.
    """

    model: str
    levels: tuple[LoadLevel, ...]
    model_version: str = ""
    protocol: Literal["http", "grpc"] = "http"
    batch_size: int = 1
    input_data: str = "random"  # "random", "zero", a perf_analyzer JSON file or directory (several: os.pathsep)
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    string_length: int = 128
    shared_memory: Literal["none", "system", "cuda"] = "none"
    output_shared_memory_size: int = 102400
    measurement_interval_ms: float = 1000.0  # window length
    # perf_analyzer's --measurement-mode: "time_windows" (windows of measurement_interval_ms) or
    # "count_windows" (a window ends at the first whole second holding measurement_request_count requests)
    measurement_mode: Literal["time_windows", "count_windows"] = "time_windows"
    measurement_request_count: int = 50
    stability_percentage: float = 10.0
    max_trials: int = 30  # max windows per level
    min_windows: int = DEFAULT_MIN_WINDOWS
    # Seconds of windows after which a level not yet precise ends (unstable) once its tail
    # percentiles have their samples; None: 10 windows' worth, perf_analyzer's worst case at
    # the same interval (its --max-trials 10); 0: none (windows until max_trials)
    level_budget_s: float | None = None
    percentile: float | None = None  # None: stability and thresholds on the average latency
    latency_threshold_ms: float | None = None  # stop the sweep past this latency
    # End a level as soon as its latency is clearly over the threshold, or clearly under it once
    # throughput is precise (the tuner only needs which side of its budget a level is on).
    stop_when_decided: bool = False
    binary_search: bool = False
    warmup_request_count: int = 0
    # perf_analyzer's --request-count: a level is one window of this many requests (0: windows until stable)
    request_count: int = 0
    warmup_s: float = 0.5
    collect_metrics: bool = False
    metrics_url: str | None = None
    metrics_interval_ms: float = 1000.0
    request_intervals_file: str | None = None
    seed: int = 0
    workers: int = 1  # load-generator processes
    max_outstanding: int = 1000  # open loop: cap on requests in flight before sends count as dropped
    # A level does not stop before these percentiles have enough samples beyond them to be
    # certified: the ones the gate judges by default, so profile, profile, gate can pass.
    tail_percentiles: tuple[float, ...] = DEFAULT_TAIL_PERCENTILES

    # Streaming (decoupled models over gRPC ModelStreamInfer) and sequence (stateful) models.
    streaming: bool = False
    goodput_slo_ms: dict[str, float] = field(default_factory=dict)  # e.g. {"ttft": 200, "itl": 20}
    sequence_length: int = 20
    sequence_length_specified: bool = False  # with input data: else a sequence is one data stream
    sequence_length_variation: float = 20.0  # percent
    sequence_id_start: int = 1
    sequence_id_end: int | None = None  # exclusive; None: unbounded
    num_of_sequences: int = 4  # open loop: concurrent sequences
    serial_sequences: bool = False
    string_sequence_ids: bool = False
    # Trace replay (one open-loop pass): perf_analyzer's --fixed-schedule (timestamps in the
    # --input-data file) or a JSONL trace file.
    fixed_schedule: bool = False
    trace: str | None = None
    trace_speed: float = 1.0  # replay the trace this many times faster (timestamps divided by it)
    output_tokens_tensor: str | None = None  # count tokens as this output's elements, not one per response
    # perf_analyzer's --string-data: every BYTES element of generated data holds this string
    string_data: str | None = None
    # Models whose server statistics join the breakdown beside the model's: perf_analyzer's
    # --bls-composing-models (the models a BLS model calls; an ensemble's steps are found from its config)
    bls_composing_models: tuple[str, ...] = ()
    # perf_analyzer's -H: extra HTTP headers (name, value) on every HTTP infer request
    http_headers: tuple[tuple[str, str], ...] = ()
    # perf_analyzer's --profile-export-file: every request's timestamps, in perf_analyzer's JSON layout
    profile_export_file: str | None = None
    # perf_analyzer's --grpc-compression-algorithm: "", "gzip" or "deflate" (unary gRPC requests)
    grpc_compression: str = ""
    # perf_analyzer's --input-tensor-format / --output-tensor-format over HTTP: "binary" or "json"
    input_tensor_format: str = "binary"
    output_tensor_format: str = "binary"
    # TLS for the load's connections (https:// -u, or --ssl-grpc-use-ssl); None: plain TCP
    tls: TlsSpec | None = None
    # perf_analyzer's --periodic-concurrency-range (start, end, step) with --request-period: one
    # streamed run whose concurrency grows by step each time every request had request_period responses
    periodic_concurrency: tuple[int, int, int] | None = None
    request_period: int = 10
    # A traffic mix (`perfkit profile -m A -m B --mix A:3,B:1`): every model and its weight, one
    # engine drawing each request's model by weight; `model` is the first. Empty: `model` alone.
    mix: tuple[tuple[str, int], ...] = ()

    @property
    def mix_label(self) -> str:
        """The mix as the user writes it (`batcher:3,hungry:1`); the model's name without a mix."""
        return ",".join(f"{m}:{w}" for m, w in self.mix) if self.mix else self.model


def spec_defaults() -> dict[str, Any]:
    """ProfileSpec's defaults by field name: what the CLI's flags and sweep files default to."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(ProfileSpec):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


# Request outcome codes shared by the load generator and the recorder.
# 0 is success; HTTP errors keep their status code (400..599); gRPC errors are 1000 + status
# code; negative codes are client-side outcomes.
STATUS_OK = 0
STATUS_CONNECTION_CLOSED = -1
STATUS_CONNECTION_REFUSED = -2
STATUS_DROPPED = -3  # open loop: could not be sent (max outstanding reached)
STATUS_UNFINISHED = -4  # still in flight when the level's drain timeout ran out
STATUS_PROTOCOL = -5  # a response perfkit could not parse
STATUS_STREAM_ERROR = -6  # a streamed request answered with an error message on the stream
GRPC_STATUS_BASE = 1000
_CLIENT_STATUS_NAMES = {
    STATUS_CONNECTION_CLOSED: "connection_closed",
    STATUS_CONNECTION_REFUSED: "connection_refused",
    STATUS_DROPPED: "dropped",
    STATUS_UNFINISHED: "unfinished",
    STATUS_PROTOCOL: "protocol_error",
    STATUS_STREAM_ERROR: "stream_error",
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
    (status int32), all of one length. Streamed requests (decoupled models) also carry
    response_ns: an object array holding, per request, an int64 array of the arrival times
    of its non-empty responses (tokens); done_ns is then its final response. None for
    unary requests.
    """

    due_ns: Any
    sent_ns: Any
    done_ns: Any
    status: Any
    error_examples: dict[int, str] = field(default_factory=dict)
    response_ns: Any = None
    output_tokens: Any = None  # per request: elements of a declared output tensor over its responses
    reconnects: int = 0  # connections that died under the load generator and were replaced
    model: Any = None  # a traffic mix: per request, its model's index in ProfileSpec.mix (int16); else None

    def __len__(self) -> int:
        return len(self.done_ns)

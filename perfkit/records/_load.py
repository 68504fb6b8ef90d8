"""The load spec: what to measure and how (ProfileSpec, its levels and defaults)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from perfkit.records._openai import OpenAISpec

LoadMode = Literal["concurrency", "request_rate", "custom_intervals", "trace"]
LatencyKind = Literal["service", "corrected"]
Distribution = Literal["constant", "poisson", "onoff"]
# On/off arrivals' windows when none are given: 4 bursts a second, on a quarter of the time.
DEFAULT_BURST_ON_MS = 62.5
DEFAULT_BURST_OFF_MS = 187.5
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
    """One load level: concurrency N, or a request rate (constant/poisson/onoff), or an intervals file.

    "onoff": bursts of burst_on_ms with evenly spaced sends, then burst_off_ms of none; `value`
    is the mean rate over the cycle (perfkit/schedule.py's onoff_due_ns).
    """

    mode: LoadMode
    value: float  # concurrency (integral) or target rate in requests/s
    distribution: Distribution | None = None
    burst_on_ms: float | None = None  # onoff only (None: DEFAULT_BURST_ON_MS)
    burst_off_ms: float | None = None  # onoff only (None: DEFAULT_BURST_OFF_MS)

    @property
    def bursts_ms(self) -> tuple[float, float]:
        """(on, off) window lengths of an onoff level, defaults filled in."""
        on = DEFAULT_BURST_ON_MS if self.burst_on_ms is None else self.burst_on_ms
        off = DEFAULT_BURST_OFF_MS if self.burst_off_ms is None else self.burst_off_ms
        return on, off

    @property
    def label(self) -> str:
        if self.mode == "concurrency":
            return f"concurrency {int(self.value)}"
        if self.mode == "request_rate" and self.distribution == "onoff":
            on, off = self.bursts_ms
            return f"{self.value:g} req/s onoff ({on:g} ms on, {off:g} ms off)"
        if self.mode == "request_rate":
            return f"{self.value:g} req/s {self.distribution or 'constant'}"
        if self.mode == "trace":
            return f"trace replay ({self.value:.4g} req/s mean)"
        return f"custom intervals ({self.value:g} req/s mean)"


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
    once level_budget_s is spent, or the precision asked is out of its reach, and
    tail_percentiles have their samples, flagged unstable.

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
    # Of generated (random) inputs, the fraction of requests that repeat an earlier request's inputs
    # (loadgen/_repeats.py): the workload a response cache is for. 0: every request alike (one input).
    repeat_fraction: float = 0.0
    shared_memory: Literal["none", "system", "cuda"] = "none"
    output_shared_memory_size: int = 102400
    measurement_interval_ms: float = 1000.0  # window length
    # perf_analyzer's --measurement-mode: "time_windows" (windows of measurement_interval_ms) or
    # "count_windows" (a window ends at the first whole second holding measurement_request_count requests)
    measurement_mode: Literal["time_windows", "count_windows"] = "time_windows"
    measurement_request_count: int = 50
    stability_percentage: float = 10.0
    max_trials: int = 30  # max windows per level
    # How a level ends: "precision" (perfkit's: the CI half-widths above, drift, budget) or "stability"
    # (perf_analyzer's: the last 3 windows' throughput and latency within stability_percentage of each
    # other, measure/_window_stability.py): the `perf_analyzer` command's, and `perfkit profile`'s when
    # -s, -r or -p is given
    stop_rule: Literal["precision", "stability"] = "precision"
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
    # perf_analyzer's --request-parameter: (name, value, type) with type "string", "int" or "bool", set in
    # every infer request's parameters (gRPC's map, HTTP's JSON `parameters`)
    request_parameters: tuple[tuple[str, str, str], ...] = ()
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
    # perf_analyzer's --service-kind: "triton" (KServe v2 over HTTP/gRPC) or "openai" (an OpenAI-compatible
    # endpoint, `openai` saying what is sent)
    service_kind: Literal["triton", "openai"] = "triton"
    openai: OpenAISpec | None = None

    @property
    def mix_label(self) -> str:
        """The mix as the user writes it (`model_a:3,model_b:1`); the model's name without a mix."""
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

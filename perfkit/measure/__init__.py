"""Measure stage: runs a ProfileSpec against a server and produces a RunRecord.

Public API:
- profile(server, spec, ...) -> RunRecord   (saved to record_path after every level)
- levels_frame(record) -> pandas.DataFrame  (one row per level)
- write_csv(record, path)                   (perf_analyzer's -f columns)
- summary_table(record) -> str               (the terminal summary, one row per level)
- machine_info() -> Machine                 (the one description of the client machine)
- progress events: LevelStarted, WindowMeasured, LevelDone (on_progress gets them; logs go to
  the "perfkit.measure" logger)
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from perfkit import __version__
from perfkit.errors import MeasurementError, ServerError, UsageError
from perfkit.loadgen import (
    EngineConfig,
    FileRequest,
    LoadGenerator,
    ModelIO,
    StreamConfig,
    Tensor,
    build_requests,
    grpc_payload,
    http_json_payload,
    http_payload,
    read_sources,
)
from perfkit.measure._context import machine_info, make_record, served_config_sha256, server_info
from perfkit.measure._coverage import rerun_precision
from perfkit.measure._csv import levels_frame, write_csv
from perfkit.measure._events import (
    LevelDone,
    LevelStarted,
    PlacedWorker,
    Progress,
    ProgressEvent,
    WindowMeasured,
    WorkersPlaced,
)
from perfkit.measure._export import write_export
from perfkit.measure._level import measure_level
from perfkit.measure._metrics import MetricsSampler
from perfkit.measure._mix import check_mix, mix_engine_config, parse_mix, synthetic_step
from perfkit.measure._periodic import measure_periodic, periodic_level
from perfkit.measure._replay import replay_profile, trace_mean_rate
from perfkit.measure._server_stats import composing_models
from perfkit.measure._shm import SharedMemory
from perfkit.measure._stopping import LevelStop
from perfkit.measure._stream_setup import is_sequence_model, stream_config, streamed_steps, with_composing_sequence
from perfkit.measure._streaming import parse_goodput
from perfkit.measure._summary import summary_table
from perfkit.measure._validate import OutputMismatchError, validate_outputs
from perfkit.records import LevelResult, LoadLevel, ProfileSpec, RunRecord, TlsSpec
from perfkit.schedule import read_intervals_file
from perfkit.server.base import Server
from perfkit.server.remote import parse_host_port
from perfkit.server.tls import check_handshake

__all__ = [
    "LevelDone",
    "LevelStarted",
    "LevelStop",
    "OutputMismatchError",
    "PlacedWorker",
    "Progress",
    "ProgressEvent",
    "WindowMeasured",
    "WorkersPlaced",
    "levels_frame",
    "parse_goodput",
    "parse_mix",
    "trace_mean_rate",
    "machine_info",
    "nothing_measured",
    "over_latency_threshold",
    "profile",
    "rerun_precision",
    "served_config_sha256",
    "validate_outputs",
    "write_csv",
    "summary_table",
]

_log = logging.getLogger(__name__)


def _steps(io: ModelIO, spec: ProfileSpec) -> tuple[list[list[Tensor]], list[FileRequest]]:
    """The tensors of each distinct request, and the file's requests (empty for generated data)."""
    if spec.input_data in ("random", "zero"):
        return [synthetic_step(io, spec)], []
    # a JSON file, a directory (one file per input), or several of them (the flag repeated)
    data = read_sources(io, spec.input_data, shapes=spec.shapes)
    requests = build_requests(io, data, batch_size=spec.batch_size)
    return [list(r.tensors) for r in requests], requests


def _check_spec(io: ModelIO, spec: ProfileSpec) -> None:
    if spec.batch_size < 1:
        raise UsageError(f"-b {spec.batch_size}: batch size must be at least 1")
    if io.max_batch_size == 0 and spec.batch_size > 1:
        raise UsageError(f"-b {spec.batch_size}: model {io.name!r} does not support batching (max_batch_size 0)")
    if io.max_batch_size > 0 and spec.batch_size > io.max_batch_size:
        raise UsageError(f"-b {spec.batch_size} exceeds model {io.name!r}'s max_batch_size {io.max_batch_size}")
    if not spec.levels:
        raise UsageError("no load levels to measure")


@contextlib.contextmanager
def _payloads(server: Server, io: ModelIO, spec: ProfileSpec, steps: list[list[Tensor]]) -> Iterator[tuple[bytes, ...]]:
    host = server.endpoints.http_url
    if spec.shared_memory == "none":
        if spec.protocol == "http":
            yield tuple(
                http_json_payload(
                    io, s, host, headers=spec.http_headers, parameters=spec.request_parameters,
                    input_json=spec.input_tensor_format == "json", output_json=spec.output_tensor_format == "json",
                )
                for s in steps
            )  # fmt: skip
        else:
            yield tuple(grpc_payload(io, s, parameters=spec.request_parameters) for s in steps)
        return
    if "json" in (spec.input_tensor_format, spec.output_tensor_format):
        raise UsageError("JSON tensor formats carry tensors in the request; with --shared-memory they live in regions")
    with SharedMemory(server, spec.shared_memory, io, steps, spec.output_shared_memory_size, spec.batch_size) as shm:
        if spec.protocol == "http":
            yield tuple(
                http_payload(
                    io,
                    s,
                    host,
                    shm_inputs=shm.inputs[i],
                    shm_outputs=shm.outputs,
                    headers=spec.http_headers,
                    parameters=spec.request_parameters,
                )
                for i, s in enumerate(steps)
            )
        else:
            yield tuple(
                grpc_payload(
                    io, s, shm_inputs=shm.inputs[i], shm_outputs=shm.outputs, parameters=spec.request_parameters
                )
                for i, s in enumerate(steps)
            )


def _check_tls(spec: ProfileSpec, tls: TlsSpec, host: str, port: int) -> None:
    """Refuse what does not carry TLS, then one handshake: a bad CA fails here, in one line."""
    if spec.trace or spec.fixed_schedule:
        raise UsageError(
            "TLS is carried by the level sweep's transports; trace replay and --fixed-schedule send in plain TCP",
            hint="drop the --ssl-* flags (or the https:// scheme), or those options",
        )
    check_handshake(tls, host, port, ("h2",) if spec.protocol == "grpc" else ())


def _engine_target(server: Server, protocol: str) -> tuple[str, int]:
    url = server.endpoints.http_url if protocol == "http" else server.endpoints.grpc_url
    if url is None:
        raise UsageError("-i grpc needs the server's gRPC URL", hint="pass -u HOST:GRPC_PORT with -i grpc")
    return parse_host_port(url)


def profile(
    server: Server,
    spec: ProfileSpec,
    *,
    command: tuple[str, ...] = (),
    on_progress: Progress | None = None,
    record_path: Path | None = None,
) -> RunRecord:
    """Measure every level of spec against server; returns the run record.

    The record is saved to record_path after each level (so nothing is lost). Raises
    InputError/UsageError for bad input (nothing measured), and MeasurementError (with
    `.record` holding what was measured) when the server dies or the run is interrupted.
    """
    metadata = server.model_metadata(spec.model, spec.model_version)
    config = server.model_config(spec.model)
    io = ModelIO.from_server(metadata, config, spec.model_version)
    _check_spec(io, spec)
    if spec.mix:
        check_mix(spec)
    # a sequence model behind an ensemble makes the ensemble's requests sequence requests
    kind = with_composing_sequence(config, server.model_config)
    if spec.periodic_concurrency is not None and not (spec.streaming and spec.protocol == "grpc"):
        raise UsageError("The --periodic-concurrency-range option requires bi-directional gRPC streaming.")
    if spec.tls is not None:
        _check_tls(spec, spec.tls, *_engine_target(server, spec.protocol))
    if spec.trace or spec.fixed_schedule:
        host, port = _engine_target(server, spec.protocol)
        return replay_profile(
            server, spec, io, config, host, port, command=command, on_progress=on_progress, record_path=record_path,
            kind=kind,
        )  # fmt: skip
    plain_steps, file_requests = _steps(io, spec)
    if any(r.expected for r in file_requests):
        validate_outputs(server, io, file_requests, source=spec.input_data, sequence=is_sequence_model(kind))
    steps = streamed_steps(io, spec, plain_steps)
    intervals = tuple(read_intervals_file(spec.request_intervals_file)) if spec.request_intervals_file else ()
    stats_models = list(dict.fromkeys([spec.model, *composing_models(config), *spec.bls_composing_models]))
    if spec.mix:
        stats_models = [m for m, _ in spec.mix]
    info = server_info(server, spec.protocol)
    created = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    levels: list[LevelResult] = []
    experiments: list[dict[str, Any]] = []  # --profile-export-file

    def record(status: str = "ok", error: str | None = None) -> RunRecord:
        rec = make_record(
            spec=spec,
            command=command,
            server=info,
            model_config=config,
            levels=levels,
            status=status,
            error=error,
            created_utc=created,
        )
        if record_path is not None:
            rec.save(record_path)
        return rec

    metrics = None
    if spec.collect_metrics:
        metrics = MetricsSampler(spec.metrics_url or server.endpoints.metrics_url, spec.metrics_interval_ms / 1e3)
        metrics.start()
    host, port = _engine_target(server, spec.protocol)
    try:
        with _payloads(server, io, spec, steps) as payloads:
            cfg: EngineConfig | StreamConfig = EngineConfig(
                spec.protocol, host, port, payloads, intervals, seed=spec.seed, max_outstanding=spec.max_outstanding,
                compression=spec.grpc_compression if spec.protocol == "grpc" else "", tls=spec.tls,
                metadata=spec.http_headers if spec.protocol == "grpc" else (),
            )  # fmt: skip
            # streamed requests (--streaming, sequence models) go through the stream engine
            stream_cfg = stream_config(spec, kind, host, port, payloads, intervals, io=io, steps=steps)
            if stream_cfg is not None and spec.tls is not None:
                raise UsageError(
                    "TLS is carried by the unary HTTP and gRPC transports;"
                    " streamed and sequence requests are sent in plain TCP",
                    hint="drop the --ssl-* flags (or the https:// scheme) for this model",
                )
            cfg = stream_cfg or cfg
            if spec.mix:
                cfg = mix_engine_config(server, spec, host, port, intervals, _check_spec)
            with LoadGenerator(cfg, workers=spec.workers) as gen:

                def run(level: LoadLevel) -> LevelResult:
                    _log.info("measuring %s of %s", level.label, spec.mix_label)
                    if on_progress:
                        on_progress(LevelStarted(level))
                    if spec.periodic_concurrency is not None:
                        outcome = measure_periodic(server, gen, spec, stats_models, metrics)
                    else:
                        outcome = measure_level(server, gen, spec, level, stats_models, metrics, on_progress)
                    levels.append(outcome.result)
                    if outcome.export is not None and spec.profile_export_file:
                        experiments.append(outcome.export)
                        write_export(Path(spec.profile_export_file), experiments, f"perfkit {__version__}")
                    if outcome.error:
                        rec = record("failed", outcome.error)
                        raise MeasurementError(outcome.error, hint="partial results saved").with_record(rec)
                    record()
                    r = outcome.result
                    _log.info(
                        "%s: %.1f infer/s, p99 %.2f ms, %s after %d windows",
                        level.label,
                        r.throughput_infer_per_s,
                        r.latency().p99_us / 1e3,
                        "stable" if r.stable else "unstable",
                        len(r.windows),
                    )
                    if on_progress:
                        on_progress(LevelDone(level, r))
                    return outcome.result

                if spec.periodic_concurrency is not None:
                    run(periodic_level(spec))
                elif spec.binary_search and spec.latency_threshold_ms is not None:
                    _binary_search(spec, run)
                else:
                    for level in spec.levels:
                        result = run(level)
                        if over_latency_threshold(spec, result):
                            break
    except KeyboardInterrupt:
        record("interrupted", "interrupted by the user")
        raise
    except ServerError as err:
        rec = record("failed", err.one_line())
        raise MeasurementError(f"measurement failed: {err.one_line()}").with_record(rec) from err
    finally:
        if metrics is not None:
            metrics.stop()
    if spec.binary_search:
        levels.sort(key=lambda r: r.load.value)
    return record()


def nothing_measured(record: RunRecord) -> str | None:
    """Why a run measured nothing (no level completed a single request without error), else None.

    Whatever the model kind (unary, sequence, decoupled), such a run has no result to report.
    """
    if not record.levels or any(lv.inference_count > 0 for lv in record.levels):
        return None
    sent = sum(lv.request_count for lv in record.levels)
    failed = sum(lv.error_count for lv in record.levels)
    if sent == 0:
        return f"measured nothing: no request to {record.spec.model!r} completed"
    notes = next((lv.note for lv in record.levels if lv.note), "") or ", ".join(
        f"{k} ×{v}" for lv in record.levels for k, v in lv.errors.items()
    )
    return f"measured nothing: all {failed} of {sent} requests to {record.spec.model!r} failed ({notes[:300]})"


def over_latency_threshold(spec: ProfileSpec, result: LevelResult) -> bool:
    """Whether a level's latency (mean, or spec.percentile) is past `-l`: the sweep stops there.

    perf_analyzer's --latency-threshold, on the latency alone: a level with errors or an open-loop
    shortfall under it does not stop the sweep. Not a verdict: whether a level is within a latency
    budget is perfkit.records.Budget.within, which the tuner applies to every level measured."""
    if spec.latency_threshold_ms is None:
        return False
    lat = result.latency()
    value = lat.mean_us if spec.percentile is None else lat.percentile_us(spec.percentile)
    return value > spec.latency_threshold_ms * 1e3


def _binary_search(spec: ProfileSpec, run: Callable[[LoadLevel], LevelResult]) -> None:
    """Highest level within the latency threshold, perf_analyzer's --binary-search over the range."""
    values = sorted({lv.value for lv in spec.levels})
    template = spec.levels[0]
    lo, hi = 0, len(values) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        result = run(LoadLevel(template.mode, values[mid], template.distribution))
        if over_latency_threshold(spec, result):
            hi = mid - 1
        else:
            lo = mid + 1

"""profile(): one ProfileSpec measured against one server, level by level, from this machine."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from perfkit import __version__
from perfkit.errors import UsageError
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
from perfkit.measure._cache_check import check_cache_served
from perfkit.measure._context import make_record, server_info
from perfkit.measure._events import Progress
from perfkit.measure._export import write_export
from perfkit.measure._level import LevelOutcome, measure_level
from perfkit.measure._loop import MeasureOne, run_levels
from perfkit.measure._metrics import MetricsSampler
from perfkit.measure._mix import check_mix, mix_engine_config, synthetic_step
from perfkit.measure._periodic import measure_periodic
from perfkit.measure._repeat_setup import check_repeat_spec, repeat_workload
from perfkit.measure._replay import replay_profile
from perfkit.measure._server_stats import composing_models
from perfkit.measure._shm import SharedMemory
from perfkit.measure._stream_setup import is_sequence_model, stream_config, streamed_steps, with_composing_sequence
from perfkit.measure._validate import validate_outputs
from perfkit.records import LevelResult, LoadLevel, ProfileSpec, RunRecord, TlsSpec
from perfkit.schedule import read_intervals_file
from perfkit.server.base import Server
from perfkit.server.remote import parse_host_port
from perfkit.server.tls import check_handshake


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
    check_repeat_spec(spec)
    if spec.repeat_fraction and is_sequence_model(kind):  # server docs/user_guide/response_cache.md: not supported
        raise UsageError(f"--repeat-fraction with sequence model {spec.model!r}: Triton's response cache skips it")
    plain_steps, file_requests = _steps(io, spec)
    plain_steps, order, repeats = repeat_workload(io, spec, plain_steps, file_requests)
    if any(r.expected for r in file_requests):
        validate_outputs(server, io, file_requests, source=spec.input_data, sequence=is_sequence_model(kind))
    steps = streamed_steps(io, spec, plain_steps)
    intervals = tuple(read_intervals_file(spec.request_intervals_file)) if spec.request_intervals_file else ()
    stats_models = list(dict.fromkeys([spec.model, *composing_models(config), *spec.bls_composing_models]))
    if spec.mix:
        stats_models = [m for m, _ in spec.mix]
    info = server_info(server, spec.protocol)
    created = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")

    def record(levels: list[LevelResult], status: str = "ok", error: str | None = None) -> RunRecord:
        rec = make_record(
            spec=spec,
            command=command,
            server=info,
            model_config=config,
            levels=levels,
            status=status,
            error=error,
            created_utc=created,
            repeats=repeats,
        )
        if record_path is not None:
            rec.save(record_path)
        return rec

    measurer = _measurer(server, spec, io, kind, steps, intervals, stats_models, on_progress, order, config)
    return run_levels(spec, measurer, record, on_progress)


@contextlib.contextmanager
def _measurer(
    server: Server,
    spec: ProfileSpec,
    io: ModelIO,
    kind: dict[str, Any],
    steps: list[list[Tensor]],
    intervals: tuple[int, ...],
    stats_models: list[str],
    on_progress: Progress | None,
    order: list[int] | None = None,
    config: dict[str, Any] | None = None,
) -> Iterator[MeasureOne]:
    """One load generator (and the metrics sampler, the shared-memory regions) open while levels are measured."""
    experiments: list[dict[str, Any]] = []  # --profile-export-file
    metrics = None
    if spec.collect_metrics:
        metrics = MetricsSampler(spec.metrics_url or server.endpoints.metrics_url, spec.metrics_interval_ms / 1e3)
        metrics.start()
    try:
        host, port = _engine_target(server, spec.protocol)
        with _payloads(server, io, spec, steps) as distinct:
            # --repeat-fraction: each distinct input encoded once, sent in the sequence's order
            payloads = distinct if order is None else tuple(distinct[k] for k in order)
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

                def measure(level: LoadLevel) -> LevelOutcome:
                    if spec.periodic_concurrency is not None:
                        outcome = measure_periodic(server, gen, spec, stats_models, metrics)
                    else:
                        outcome = measure_level(server, gen, spec, level, stats_models, metrics, on_progress)
                    if spec.repeat_fraction > 0:  # a stated repeat rate measured on a server with no cache
                        check_cache_served(config or {}, outcome.result.server, server.endpoints.http_url)
                    if outcome.export is not None and spec.profile_export_file:
                        experiments.append(outcome.export)
                        write_export(Path(spec.profile_export_file), experiments, f"perfkit {__version__}")
                    return outcome

                yield measure
    finally:
        if metrics is not None:
            metrics.stop()

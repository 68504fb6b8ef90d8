"""Trace replay: send recorded requests at their timestamps, once, open loop.

Two sources:
- perf_analyzer's --fixed-schedule: the --input-data JSON, whose every data entry
  carries a "timestamp" (ms from the start) beside the model's inputs;
- a JSONL trace: one object per line with "timestamp" (ms), and either "inputs"
  ({input name: values}, perf_analyzer's value forms) or "input_length" /
  "output_length" (an LLM-style request: a prompt of that many words and max_tokens),
  and an optional "session_id": a session's turns go one at a time in trace order
  (a turn due while the previous one is in flight waits, and is counted late); on a
  sequence model a session is a sequence, with start/end flags.

Replayed over the stream engine (gRPC ModelStreamInfer, or HTTP generate_stream with
--streaming), with the same due/sent accounting as every open-loop level: late sends,
dropped sends (max outstanding), and latency corrected from the due time.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfkit.errors import InputError, UsageError
from perfkit.loadgen import ModelIO, StreamConfig, Tensor, file_tensors, grpc_payload, sse_payload
from perfkit.records import LoadLevel, ProfileSpec

TRACE_FIELDS = {"timestamp", "inputs", "input_length", "output_length", "session_id"}


@dataclass(frozen=True)
class TraceEntry:
    """One replayed request: when it is due (ms from the start), its inputs, its session."""

    timestamp_ms: float
    inputs: dict[str, Any]
    session: str | None = None


def _lengths_inputs(io: ModelIO, where: str, obj: dict[str, Any]) -> dict[str, Any]:
    names = {name for name, _, _ in io.inputs}
    if "text_input" not in names:
        raise InputError(f"{where}: input_length needs a model input named 'text_input' (model {io.name!r})")
    words = int(obj.get("input_length", 1))
    inputs: dict[str, Any] = {"text_input": [" ".join(["tok"] * max(1, words))]}
    if "max_tokens" in names:
        inputs["max_tokens"] = [int(obj.get("output_length", 16))]
    elif "output_length" in obj:
        raise InputError(f"{where}: output_length needs a model input named 'max_tokens'")
    if "stream" in names:
        inputs["stream"] = [True]
    return inputs


def read_jsonl_trace(path: Path, io: ModelIO) -> list[TraceEntry]:
    """Entries of a JSONL trace, in file order; raises InputError naming the line and field."""
    entries = []
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as err:
        raise InputError(f"--trace {path}: cannot read ({err.strerror})") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"--trace {path} line {n}"
        try:
            obj = json.loads(line)
        except ValueError as err:
            raise InputError(f"{where}: not valid JSON ({err})") from None
        if not isinstance(obj, dict):
            raise InputError(f"{where}: expected an object")
        unknown = set(obj) - TRACE_FIELDS
        if unknown:
            raise InputError(f"{where}: unknown field(s) {sorted(unknown)} (known: {sorted(TRACE_FIELDS)})")
        ts = obj.get("timestamp")
        if not isinstance(ts, (int, float)) or ts < 0:
            raise InputError(f"{where}: 'timestamp' must be a number of ms >= 0, got {ts!r}")
        if "inputs" in obj:
            if not isinstance(obj["inputs"], dict):
                raise InputError(f"{where}: 'inputs' must be an object of input name -> values")
            inputs = obj["inputs"]
        elif "input_length" in obj or "output_length" in obj:
            inputs = _lengths_inputs(io, where, obj)
        else:
            raise InputError(f"{where}: give 'inputs' or 'input_length'/'output_length'")
        session = obj.get("session_id")
        entries.append(TraceEntry(float(ts), inputs, None if session is None else str(session)))
    if not entries:
        raise InputError(f"--trace {path}: no requests in the trace")
    return entries


def trace_timestamps_ms(path: Path) -> list[float]:
    """A JSONL trace's timestamps (ms) in file order, from its timestamps alone (what trace_mean_rate
    and the tuner's prediction of a replay read); raises InputError naming the file and line."""
    stamps: list[float] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise InputError(f"--trace {path}: cannot read: {err.strerror}") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            stamps.append(float(json.loads(line)["timestamp"]))
        except (ValueError, KeyError, TypeError):
            raise InputError(f"--trace {path} line {n}: no numeric 'timestamp'") from None
    if not stamps:
        raise InputError(f"--trace {path} holds no request")
    return stamps


def trace_mean_rate(path: Path) -> float:
    """A JSONL trace's mean request rate (requests over its span, req/s) as recorded, from its
    timestamps alone; raises InputError naming the file and line."""
    stamps = trace_timestamps_ms(path)
    return len(stamps) / max((max(stamps) - min(stamps)) / 1e3, 1e-3)


def read_fixed_schedule(path: Path) -> list[TraceEntry]:
    """Entries of perf_analyzer's --fixed-schedule input data (a 'timestamp' in every entry)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise InputError(f"--input-data {path}: not a readable JSON file ({err})") from None
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list) or not data:
        raise InputError(f"--input-data {path}: --fixed-schedule needs a non-empty 'data' list")
    entries = []
    for i, step in enumerate(data):
        if not isinstance(step, dict) or "timestamp" not in step:
            raise InputError(f"--input-data {path}: data[{i}] has no 'timestamp' (needed by --fixed-schedule)")
        ts = step["timestamp"]
        ts = ts[0] if isinstance(ts, list) and ts else ts
        if not isinstance(ts, (int, float)) or ts < 0:
            raise InputError(f"--input-data {path}: data[{i}].timestamp must be ms >= 0, got {ts!r}")
        entries.append(TraceEntry(float(ts), {k: v for k, v in step.items() if k != "timestamp"}))
    return entries


def trace_tensors(io: ModelIO, entries: list[TraceEntry], spec: ProfileSpec, source: str) -> list[list[Tensor]]:
    """Each entry's tensors, parsed by the perf_analyzer-format reader (one data step per entry)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace-data.json"
        path.write_text(json.dumps({"data": [e.inputs for e in entries]}))
        try:
            return file_tensors(io, path, batch_size=spec.batch_size, shapes=spec.shapes)
        except InputError as err:
            # name the trace, not the temporary file; data[i] is the trace's i-th request
            raise InputError(err.message.replace(str(path), source), hint=err.hint) from None


def trace_config(
    io: ModelIO, spec: ProfileSpec, entries: list[TraceEntry], steps: list[list[Tensor]], host: str, port: int, *,
    sequence: Any,
) -> tuple[StreamConfig, LoadLevel]:  # fmt: skip
    """The stream engine's config replaying entries in time order, and the level it is measured as."""
    order = sorted(range(len(entries)), key=lambda i: entries[i].timestamp_ms)
    start_ms = entries[order[0]].timestamp_ms
    speed = spec.trace_speed
    if not speed > 0:
        raise UsageError(f"trace speed {speed!r} must be positive")
    schedule = tuple(int((entries[i].timestamp_ms - start_ms) * 1e6 / speed) for i in order)
    names: dict[str, int] = {}
    sessions = tuple(
        -1 if entries[i].session is None else names.setdefault(str(entries[i].session), len(names)) for i in order
    )
    if spec.protocol == "grpc":
        payloads = tuple(grpc_payload(io, steps[i], parameters=spec.request_parameters) for i in order)
        transport = "grpc"
    else:
        if sequence is not None:
            raise UsageError(f"sequence model {spec.model!r} is replayed over gRPC streaming", hint="add -i grpc")
        if spec.request_parameters:
            raise UsageError("--request-parameter: a trace is replayed over HTTP as generate_stream calls, which"
                             " take no request parameters", hint="add -i grpc")  # fmt: skip
        payloads = tuple(sse_payload(io, steps[i], f"{host}:{port}", spec.http_headers) for i in order)
        transport = "sse"
    span_s = max(schedule[-1] / 1e9, 1e-3)
    level = LoadLevel("trace", len(schedule) / span_s)
    cfg = StreamConfig(
        host, port, payloads, seed=spec.seed, max_outstanding=spec.max_outstanding, sequences=sequence,
        transport=transport, schedule_ns=schedule, sessions=sessions, token_output=spec.output_tokens_tensor or "",
        headers=spec.http_headers, compression=spec.grpc_compression if transport == "grpc" else "",
    )  # fmt: skip
    return cfg, level


def replay_level(
    server: Any,
    gen: Any,
    spec: ProfileSpec,
    level: LoadLevel,
    span_ns: int,
    stats_models: list[str],
    metrics: Any,
) -> Any:
    """Replay the whole trace once as one level (windows over its span); returns a LevelOutcome."""
    from time import perf_counter_ns

    from perfkit.loadgen import sleep_until
    from perfkit.measure import _server_stats
    from perfkit.measure._level import LevelOutcome, _result
    from perfkit.recorder import LevelRecorder

    try:
        before = _server_stats.snapshot(server.model_stats, stats_models)
    except Exception:
        before = None
    t0 = gen.start(level)
    window_ns = int(spec.measurement_interval_ms * 1e6)
    count = max(1, -(-(span_ns + 1) // window_ns))
    end_ns = t0 + count * window_ns
    rec = LevelRecorder(start_ns=t0, window_ns=window_ns, closed_loop=False, batch_size=spec.batch_size)
    sleep_until(t0 + span_ns + 1)
    rec.add(gen.stop(drain_timeout_s=30.0))
    # every request of the trace counts, however long its answer took
    end_ns = max(end_ns, perf_counter_ns())
    count = max(count, -(-(end_ns - t0) // window_ns))
    windows = rec.windows(int(count))
    try:
        after = _server_stats.snapshot(server.model_stats, stats_models)
    except Exception:
        after = None
    result = _result(
        rec, spec, level, windows, t0 + int(count) * window_ns, True, before, after, stats_models, metrics, t0, False
    )
    return LevelOutcome(result)


def replay_profile(
    server: Any,
    spec: ProfileSpec,
    io: ModelIO,
    config: dict[str, Any],
    host: str,
    port: int,
    *,
    command: tuple[str, ...],
    on_progress: Any,
    record_path: Path | None,
    kind: dict[str, Any] | None = None,
) -> Any:
    """Replay spec's trace (or fixed schedule) once; returns the run record (one 'trace' level).

    Raises InputError for a bad trace, UsageError for a setup the replay cannot carry.
    """
    import datetime as dt

    from perfkit.loadgen import LoadGenerator
    from perfkit.measure._context import make_record, server_info
    from perfkit.measure._metrics import MetricsSampler
    from perfkit.measure._server_stats import composing_models
    from perfkit.measure._stream_setup import is_decoupled, is_sequence_model, sequence_spec

    if spec.shared_memory != "none":
        raise UsageError("trace replay sends its requests' data in the requests, not shared memory")
    if spec.trace and spec.fixed_schedule:
        raise UsageError("give --trace or --fixed-schedule, not both")
    if spec.fixed_schedule:
        if spec.input_data in ("random", "zero"):
            raise UsageError("--fixed-schedule replays an --input-data JSON file whose entries carry 'timestamp'")
        source = f"--input-data {spec.input_data}"
        entries = read_fixed_schedule(Path(spec.input_data))
    else:
        source = f"--trace {spec.trace}"
        entries = read_jsonl_trace(Path(str(spec.trace)), io)
    if is_decoupled(config) and not spec.streaming:
        raise UsageError(f"model {spec.model!r} is decoupled", hint="add --streaming")
    if spec.protocol == "http" and not spec.streaming:
        raise UsageError("trace replay goes over gRPC streaming (or HTTP generate_stream)", hint="add -i grpc")
    steps = trace_tensors(io, entries, spec, source)
    sequence = sequence_spec(spec) if is_sequence_model(kind or config) else None
    if sequence is not None and any(e.session is None for e in entries):
        raise InputError(
            f"{source}: model {spec.model!r} is a sequence model: every request needs a 'session_id'",
            hint="a session is one sequence (its first turn starts it, its last ends it)",
        )
    cfg, level = trace_config(io, spec, entries, steps, host, port, sequence=sequence)
    stats_models = [spec.model, *composing_models(config)]
    info = server_info(server, spec.protocol)
    created = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    metrics = None
    if spec.collect_metrics:
        metrics = MetricsSampler(spec.metrics_url or server.endpoints.metrics_url, spec.metrics_interval_ms / 1e3)
        metrics.start()
    try:
        if on_progress:
            on_progress({"event": "level_start", "level": level})
        with LoadGenerator(cfg) as gen:
            outcome = replay_level(server, gen, spec, level, cfg.schedule_ns[-1], stats_models, metrics)
        if on_progress:
            on_progress({"event": "level_done", "level": level, "result": outcome.result})
    finally:
        if metrics is not None:
            metrics.stop()
    rec = make_record(
        spec=spec, command=command, server=info, model_config=config, levels=[outcome.result], created_utc=created
    )
    if record_path is not None:
        rec.save(record_path)
    return rec

"""Which requests are streamed, and the stream engine's configuration for a spec."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from perfkit.errors import UsageError
from perfkit.loadgen import (
    ModelIO,
    SequenceSpec,
    StreamConfig,
    Tensor,
    http_infer_path,
    http_sequence_body,
    sse_payload,
)


def is_decoupled(config: dict[str, Any]) -> bool:
    """Whether the served model config is decoupled (may send any number of responses)."""
    return bool((config.get("model_transaction_policy") or {}).get("decoupled"))


def is_sequence_model(config: dict[str, Any]) -> bool:
    """Whether the served model config uses the sequence batcher (a stateful model)."""
    return "sequence_batching" in config


def with_composing_sequence(config: dict[str, Any], config_of: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    """The config whose model kind decides how requests go: an ensemble that calls a sequence model
    (directly or through nested ensembles) carries that model's `sequence_batching`, as perf_analyzer
    treats it (its model parser marks such an ensemble sequential: correlation IDs and start/end flags).

    `config_of(name)` returns a composing model's config; raises what it raises.
    """
    if "sequence_batching" in config:
        return config
    seen: set[str] = set()
    todo = [s.get("model_name") for s in (config.get("ensemble_scheduling") or {}).get("step", [])]
    while todo:
        name = todo.pop(0)
        if not name or name in seen:
            continue
        seen.add(name)
        sub = config_of(name)
        if "sequence_batching" in sub:
            return {**config, "sequence_batching": sub["sequence_batching"]}
        todo.extend(s.get("model_name") for s in (sub.get("ensemble_scheduling") or {}).get("step", []))
    return config


def streamed_steps(io: ModelIO, spec: Any, steps: list[list[Tensor]]) -> list[list[Tensor]]:
    """Steps as sent when streaming: synthetic data sets a BOOL input named 'stream' to true.

    Random data would switch an LLM-style model's streaming off for half the requests;
    data from a file is sent as written.
    """
    if not spec.streaming or spec.input_data not in ("random", "zero"):
        return steps
    out = []
    for step in steps:
        row = []
        for t in step:
            if t.name == "stream" and t.datatype == "BOOL":
                t = dataclasses.replace(t, data=b"\x01" * len(t.data))
            row.append(t)
        out.append(row)
    return out


def stream_config(
    spec: Any,
    config: dict[str, Any],
    host: str,
    port: int,
    payloads: tuple[bytes, ...],
    intervals_ns: tuple[int, ...],
    *,
    io: ModelIO,
    steps: list[list[Tensor]],
) -> StreamConfig | None:
    """The stream engine's config where requests are streamed (decoupled or sequence models), else None.

    gRPC streams over ModelStreamInfer; HTTP streams over generate_stream (server-sent
    events), which maps the model's inputs from JSON; sequence models over HTTP (without
    --streaming) use plain infer calls carrying the sequence parameters, one request in
    flight per sequence. Raises UsageError for a decoupled model without --streaming, and
    for shared memory over HTTP.
    """
    decoupled = is_decoupled(config)
    sequence = is_sequence_model(config)
    if decoupled and not spec.streaming:
        raise UsageError(
            f"model {spec.model!r} is decoupled: its responses arrive on a stream",
            hint="add --streaming (with -i grpc), as perf_analyzer requires",
        )
    if not (spec.streaming or sequence):
        return None
    if spec.workers > 1:
        raise UsageError(
            f"--workers {spec.workers}: streamed requests run in one process (one stream carries them all)",
            hint="drop --workers",
        )
    if spec.protocol != "grpc" and spec.request_parameters:
        raise UsageError(
            "--request-parameter over HTTP goes in plain infer requests; "
            + ("a sequence model's" if sequence else "generate_stream's")
            + " requests over HTTP carry none",
            hint="add -i grpc (perf_analyzer sends request parameters over gRPC only)",
        )
    if spec.protocol != "grpc" and sequence and not spec.streaming:
        if spec.shared_memory != "none":
            raise UsageError(f"sequence model {spec.model!r} over HTTP sends JSON inputs, not shared memory")
        from_file = spec.input_data not in ("random", "zero")
        # one request in flight per sequence: steps on separate connections could cross
        serial = dataclasses.replace(sequence_spec(spec, streams=_one_stream(steps) if from_file else ()), serial=True)
        bodies = tuple(http_sequence_body(io, step) for step in steps)
        return StreamConfig(
            host, port, bodies, intervals_ns, seed=spec.seed, max_outstanding=spec.max_outstanding, sequences=serial,
            transport="http", http_path=http_infer_path(io), headers=spec.http_headers,
        )  # fmt: skip
    if spec.protocol != "grpc":
        if sequence:
            raise UsageError(f"sequence model {spec.model!r} streams over gRPC only", hint="add -i grpc")
        if spec.shared_memory != "none":
            raise UsageError("--streaming over HTTP (generate_stream) takes JSON inputs, not shared memory")
        if spec.output_tokens_tensor:
            raise UsageError("--output-tokens-tensor counts gRPC responses' tensors", hint="use -i grpc")
        sse = tuple(sse_payload(io, step, f"{host}:{port}", spec.http_headers) for step in steps)
        return StreamConfig(
            host, port, sse, intervals_ns, seed=spec.seed, max_outstanding=spec.max_outstanding, transport="sse"
        )
    seq: SequenceSpec | None = None
    if sequence:
        # a perf_analyzer-format file's steps form one data stream, sent step by step
        from_file = spec.input_data not in ("random", "zero")
        seq = sequence_spec(spec, streams=_one_stream(steps) if from_file else ())
    token_output = spec.output_tokens_tensor or ""
    if token_output and token_output not in io.outputs:
        raise UsageError(
            f"--output-tokens-tensor {token_output}: model {spec.model!r} has no such output",
            hint=f"outputs: {', '.join(io.outputs)}",
        )
    return StreamConfig(
        host, port, payloads, intervals_ns, seed=spec.seed, max_outstanding=spec.max_outstanding, sequences=seq,
        token_output=token_output, headers=spec.http_headers, compression=spec.grpc_compression,
        periodic=spec.periodic_concurrency is not None,
    )  # fmt: skip


def sequence_spec(spec: Any, streams: tuple[tuple[int, ...], ...] = ()) -> SequenceSpec:
    """The sequence rules of a spec (perf_analyzer's sequence flags)."""
    return SequenceSpec(
        length=spec.sequence_length,
        length_specified=spec.sequence_length_specified,
        length_variation_pct=spec.sequence_length_variation,
        id_start=spec.sequence_id_start,
        id_end=spec.sequence_id_end,
        num_sequences=spec.num_of_sequences,
        serial=spec.serial_sequences,
        string_ids=spec.string_sequence_ids,
        streams=streams,
    )


def _one_stream(steps: list[list[Tensor]]) -> tuple[tuple[int, ...], ...]:
    # a perf_analyzer-format file's steps form one data stream, sent step by step
    return (tuple(range(len(steps))),)

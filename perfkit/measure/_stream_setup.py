"""Which requests are streamed, and the stream engine's configuration for a spec."""

from __future__ import annotations

import dataclasses
from typing import Any

from perfkit.errors import UsageError
from perfkit.loadgen import ModelIO, SequenceSpec, StreamConfig, Tensor


def is_decoupled(config: dict[str, Any]) -> bool:
    """Whether the served model config is decoupled (may send any number of responses)."""
    return bool((config.get("model_transaction_policy") or {}).get("decoupled"))


def is_sequence_model(config: dict[str, Any]) -> bool:
    """Whether the served model config uses the sequence batcher (a stateful model)."""
    return "sequence_batching" in config


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
) -> StreamConfig | None:
    """The stream engine's config where requests are streamed (decoupled or sequence models), else None.

    Raises UsageError for a decoupled model without --streaming, and for streamed
    requests over HTTP (ModelStreamInfer is gRPC).
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
    if spec.protocol != "grpc":
        what = "--streaming" if spec.streaming else f"sequence model {spec.model!r}"
        raise UsageError(f"{what} is measured over gRPC streaming", hint="add -i grpc")
    seq = None
    if sequence:
        seq = SequenceSpec(
            length=spec.sequence_length,
            length_specified=spec.sequence_length_specified,
            length_variation_pct=spec.sequence_length_variation,
            id_start=spec.sequence_id_start,
            id_end=spec.sequence_id_end,
            num_sequences=spec.num_of_sequences,
            serial=spec.serial_sequences,
            string_ids=spec.string_sequence_ids,
            # a perf_analyzer-format file's steps form one data stream, sent step by step
            streams=(tuple(range(len(payloads))),) if spec.input_data not in ("random", "zero") else (),
        )
    return StreamConfig(
        host, port, payloads, intervals_ns, seed=spec.seed, max_outstanding=spec.max_outstanding, sequences=seq
    )

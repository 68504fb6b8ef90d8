"""`perfkit profile` options for streamed (decoupled) and sequence models, and their summary lines."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from perfkit.errors import UsageError
from perfkit.measure import parse_goodput

_DEFAULT_SEQUENCE_LENGTH = 20


def streaming_options() -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator adding --streaming, --goodput and perf_analyzer's sequence flags."""
    opts = [
        click.option(
            "--streaming",
            is_flag=True,
            help="Stream requests over gRPC (ModelStreamInfer); needed for decoupled models, as in perf_analyzer.",
        ),
        click.option("--goodput", default=None, help="SLOs a request must meet to count, e.g. ttft:200ms,itl:20ms."),
        click.option(
            "--num-of-sequences",
            type=int,
            default=4,
            show_default=True,
            help="Sequence models, open loop: concurrent sequences.",
        ),
        click.option(
            "--sequence-length",
            type=int,
            default=None,
            help=f"Sequence models: base requests per sequence (default {_DEFAULT_SEQUENCE_LENGTH}, "
            "or a data stream's steps with --input-data FILE).",
        ),
        click.option(
            "--sequence-length-variation",
            type=float,
            default=20.0,
            show_default=True,
            help="Sequence models: +/- percent around --sequence-length.",
        ),
        click.option(
            "--sequence-id-range",
            default=None,
            help="Sequence models: start[:end] correlation IDs (end excluded; default 1, unbounded).",
        ),
        click.option("--serial-sequences", is_flag=True, help="At most one request in flight per sequence."),
        click.option("--string-sequence-ids", is_flag=True, help="Send correlation IDs as strings."),
        click.option(
            "--output-tokens-tensor",
            default=None,
            help="Count output tokens as the elements of this output tensor in each response (e.g. output_ids), "
            "not one per response (gRPC).",
        ),
        click.option(
            "--fixed-schedule",
            is_flag=True,
            help="Replay --input-data once, each entry at its 'timestamp' (ms), as perf_analyzer does.",
        ),
        click.option(
            "--trace",
            type=click.Path(path_type=Path),
            default=None,
            help="Replay a JSONL trace once: timestamp (ms), inputs or input_length/output_length, session_id.",
        ),
    ]

    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        for opt in reversed(opts):
            f = opt(f)
        return f

    return wrap


def _id_range(text: str | None) -> tuple[int, int | None]:
    if not text:
        return 1, None
    start, _, end = text.partition(":")
    try:
        lo = int(start)
        hi = int(end) if end else None
    except ValueError:
        raise UsageError(f"--sequence-id-range {text!r}: expected start[:end] integers") from None
    if lo < 0 or (hi is not None and hi <= lo):
        raise UsageError(f"--sequence-id-range {text!r}: need 0 <= start < end")
    return lo, hi


def streaming_spec_fields(kw: dict[str, Any]) -> dict[str, Any]:
    """ProfileSpec fields from the options above (consumes them from kw); raises UsageError."""
    id_start, id_end = _id_range(kw.pop("sequence_id_range"))
    # --sequence-length <= 0 (2.60: its default) and --num-of-sequences < 1 (refused) are read before click
    # parses, by perfkit/cli/_flag_checks.py, as for every perf_analyzer value check
    length = kw.pop("sequence_length")
    num = kw.pop("num_of_sequences")
    goodput = kw.pop("goodput")
    return {
        "streaming": kw.pop("streaming"),
        "goodput_slo_ms": parse_goodput(goodput) if goodput else {},
        "num_of_sequences": num,
        "sequence_length": length if length is not None else _DEFAULT_SEQUENCE_LENGTH,
        "sequence_length_specified": length is not None,
        "sequence_length_variation": kw.pop("sequence_length_variation"),
        "sequence_id_start": id_start,
        "sequence_id_end": id_end,
        "serial_sequences": kw.pop("serial_sequences"),
        "string_sequence_ids": kw.pop("string_sequence_ids"),
        "fixed_schedule": kw.pop("fixed_schedule"),
        "output_tokens_tensor": kw.pop("output_tokens_tensor"),
        "trace": str(trace) if (trace := kw.pop("trace")) else None,
    }

"""A traffic mix: several models loaded by one engine, each request drawn for a model by weight.

`parse_mix` reads `--mix A:3,B:1` against the `-m` models; `check_mix` refuses what a mix cannot
carry; `mix_engine_config` builds the one engine's config (every model's payloads and weight);
`mix_shares` splits a measured level into each model's figures (`MixShare`), which add up to the
level's own (the whole mix's) counts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import numpy as np

from perfkit.errors import UsageError
from perfkit.loadgen import (
    EngineConfig,
    ModelIO,
    Tensor,
    check_synthetic,
    grpc_payload,
    http_json_payload,
    synthetic_tensors,
)
from perfkit.measure._stream_setup import is_decoupled, is_sequence_model, with_composing_sequence
from perfkit.recorder import LevelRecorder
from perfkit.records import LevelResult, MixShare, ProfileSpec, Samples
from perfkit.server.base import Server

_ITEM = re.compile(r"^\s*([^:,\s]+)\s*:\s*([^:,\s]+)\s*$")
_FORM = "write it as MODEL:WEIGHT,MODEL:WEIGHT (e.g. --mix model_a:3,model_b:1) with positive integer weights"


def synthetic_step(io: ModelIO, spec: ProfileSpec) -> list[Tensor]:
    """The generated tensors (spec.input_data random or zero) of one request to the model."""
    check_synthetic(io)
    return synthetic_tensors(
        io,
        mode=spec.input_data,
        batch_size=spec.batch_size,
        shapes=spec.shapes,
        string_length=spec.string_length,
        seed=spec.seed,
        string_data=spec.string_data,
    )


def parse_mix(models: Sequence[str], text: str | None) -> tuple[tuple[str, int], ...]:
    """The mix of the `-m` models: `text` (`A:3,B:1`) or, when None, equal weights.

    One model and no text: () (no mix). Raises UsageError naming the value: a malformed item,
    a weight that is not a positive integer, a model not given with -m, one given twice, or a
    -m model the mix leaves out.
    """
    models = list(models)
    dup = sorted({m for m in models if models.count(m) > 1})
    if dup:
        raise UsageError(f"-m {dup[0]} is given twice", hint="name each model of the mix once")
    if text is None:
        return tuple((m, 1) for m in models) if len(models) > 1 else ()
    if not text.strip():
        raise UsageError("--mix '' is empty", hint=_FORM)
    out: list[tuple[str, int]] = []
    for item in text.split(","):
        m = _ITEM.match(item)
        if not m:
            raise UsageError(f"--mix {text!r}: {item.strip()!r} is not MODEL:WEIGHT", hint=_FORM)
        name, weight_text = m.groups()
        try:
            weight = int(weight_text)
        except ValueError:
            raise UsageError(
                f"--mix {text!r}: the weight of {name!r} is {weight_text!r}, not an integer", hint=_FORM
            ) from None
        if weight <= 0:
            raise UsageError(
                f"--mix {text!r}: the weight of {name!r} is {weight}; weights must be positive", hint=_FORM
            )
        if name not in models:
            raise UsageError(
                f"--mix {text!r} names model {name!r}, which is not given with -m",
                hint=f"add -m {name}, or mix only the models given ({', '.join(models)})",
            )
        if any(name == seen for seen, _ in out):
            raise UsageError(f"--mix {text!r} names {name!r} twice", hint=_FORM)
        out.append((name, weight))
    left_out = [m for m in models if m not in dict(out)]
    if left_out:
        raise UsageError(
            f"--mix {text!r} gives no weight to -m {left_out[0]}",
            hint=f"add {left_out[0]}:WEIGHT to --mix, or drop -m {left_out[0]}",
        )
    return tuple(out)


def check_mix(spec: ProfileSpec) -> None:
    """Refuse the options a mix cannot carry (one line each, UsageError)."""
    refused = [
        (spec.input_data not in ("random", "zero"), "--input-data FILE (a data file feeds one model)"),
        (spec.shared_memory != "none", "--shared-memory"),
        (spec.workers > 1, "--workers above 1 (the mix is drawn by one engine)"),
        (bool(spec.trace or spec.fixed_schedule), "trace replay or --fixed-schedule"),
        (spec.streaming, "--streaming"),
        (spec.request_count > 0, "--request-count"),
        (spec.periodic_concurrency is not None, "--periodic-concurrency-range"),
        (spec.measurement_mode == "count_windows", "--measurement-mode count_windows"),
        (bool(spec.profile_export_file), "--profile-export-file"),
        (spec.tls is not None, "TLS"),
        ("json" in (spec.input_tensor_format, spec.output_tensor_format), "JSON tensor formats"),
    ]
    for bad, what in refused:
        if bad:
            raise UsageError(
                f"a traffic mix ({spec.mix_label}) is measured with generated data over plain HTTP or gRPC; "
                f"{what} is not supported with it",
                hint="drop that option, or profile the models one at a time",
            )


def mix_engine_config(
    server: Server,
    spec: ProfileSpec,
    host: str,
    port: int,
    intervals: tuple[int, ...],
    check: Callable[[ModelIO, ProfileSpec], None],
) -> EngineConfig:
    """The one engine's config for spec.mix: each model's payloads and weight.

    `check(io, spec)` checks the spec against each model (batch size). Raises UsageError for a
    model a mix cannot load (streamed: decoupled or sequence), and what the server raises for
    an unknown model.
    """
    payloads: list[tuple[bytes, ...]] = []
    for name, _ in spec.mix:
        config = server.model_config(name)
        kind = with_composing_sequence(config, server.model_config)
        if is_decoupled(config) or is_sequence_model(kind):
            what = "decoupled" if is_decoupled(config) else "a sequence model"
            raise UsageError(
                f"--mix: model {name!r} is {what}; a mix carries unary requests only",
                hint=f"profile {name} on its own",
            )
        io = ModelIO.from_server(server.model_metadata(name, ""), config, "")
        check(io, spec)
        tensors = synthetic_step(io, spec)
        if spec.protocol == "http":
            url = server.endpoints.http_url
            payloads.append(
                (
                    http_json_payload(
                        io,
                        tensors,
                        url,
                        headers=spec.http_headers,
                        parameters=spec.request_parameters,
                        input_json=False,
                        output_json=False,
                    ),
                )  # fmt: skip
            )
        else:
            payloads.append((grpc_payload(io, tensors, parameters=spec.request_parameters),))
    return EngineConfig(
        spec.protocol,
        host,
        port,
        payloads[0],
        intervals,
        seed=spec.seed,
        max_outstanding=spec.max_outstanding,
        compression=spec.grpc_compression if spec.protocol == "grpc" else "",
        metadata=spec.http_headers if spec.protocol == "grpc" else (),
        mix_payloads=tuple(payloads),
        mix_weights=tuple(w for _, w in spec.mix),
    )


def model_samples(samples: Samples, index: int) -> Samples:
    """The requests of the mix's model `index` (a copy; samples without models are all model 0's)."""
    model = samples.model if samples.model is not None else np.zeros(len(samples), dtype=np.int16)
    keep = model == index
    statuses = set(np.unique(samples.status[keep]).tolist())
    return Samples(
        samples.due_ns[keep],
        samples.sent_ns[keep],
        samples.done_ns[keep],
        samples.status[keep],
        {k: v for k, v in samples.error_examples.items() if k in statuses},
        model=model[keep],
    )


def mix_shares(
    spec: ProfileSpec,
    rec: LevelRecorder,
    windows: int,
    result_of: Callable[[LevelRecorder, str], LevelResult],
) -> tuple[MixShare, ...]:
    """Each model's figures over the same level and windows: `result_of(recorder, model)` of a
    recorder holding only that model's requests."""
    out = []
    samples = rec.samples
    for index, (name, weight) in enumerate(spec.mix):
        sub = LevelRecorder(
            start_ns=rec.start_ns, window_ns=rec.window_ns, closed_loop=rec.closed_loop, batch_size=rec.batch_size
        )
        sub.add(model_samples(samples, index))
        sub.windows(windows)
        out.append(MixShare(name, weight, result_of(sub, name)))
    return tuple(out)

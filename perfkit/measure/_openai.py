"""profile_openai(): a ProfileSpec measured against an OpenAI-compatible endpoint, level by level.

The same level loop, windows, stopping rule and streaming figures as a Triton profile
(`measure_level`, `streaming_summary`): only the requests differ (synthetic prompts of an exact
length under the model's tokenizer, `perfkit.loadgen` OpenAI transport) and what the server is
asked (readiness over `/v1/models`, no statistics). After each level the requests as sent are held
against what the server reported receiving (`usage`): `LevelResult.workload`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from perfkit.errors import UsageError
from perfkit.loadgen import LoadGenerator, StreamConfig, file_bodies, openai_bodies, openai_request
from perfkit.measure._context import make_record, server_info
from perfkit.measure._events import Progress
from perfkit.measure._level import LevelOutcome, measure_level
from perfkit.measure._loop import MeasureOne, run_levels
from perfkit.records import (
    STATUS_OK,
    USAGE_TOLERANCE_REL,
    USAGE_TOLERANCE_TOKENS,
    LevelResult,
    LoadLevel,
    ProfileSpec,
    RunRecord,
    Samples,
    WorkloadCheck,
)
from perfkit.schedule import read_intervals_file
from perfkit.server.openai import OpenAIServer
from perfkit.server.remote import parse_host_port


def profile_openai(
    server: OpenAIServer,
    spec: ProfileSpec,
    *,
    command: tuple[str, ...] = (),
    on_progress: Progress | None = None,
    record_path: Path | None = None,
) -> RunRecord:
    """Measure every level of spec against an OpenAI-compatible server; returns the run record.

    Raises UsageError for what cannot be sent (no tokenizer, a streamed embeddings endpoint), ServerError
    when the server does not answer /v1/models, and MeasurementError as `profile` does.
    """
    oa = spec.openai
    if oa is None:
        raise UsageError("--service-kind openai: no OpenAI settings in the spec")
    if oa.endpoint_type == "embeddings" and spec.streaming:
        raise UsageError("--endpoint-type embeddings answers in one piece", hint="drop --streaming")
    for name, flag in (("trace", "--trace"), ("fixed_schedule", "--fixed-schedule"), ("mix", "--mix")):
        if getattr(spec, name):
            raise UsageError(f"{flag} is not carried to an OpenAI-compatible endpoint (--service-kind openai)")
    if spec.protocol != "http" or spec.shared_memory != "none" or spec.collect_metrics:
        raise UsageError(
            "--service-kind openai posts JSON over HTTP; -i grpc, --shared-memory and --collect-metrics are Triton's",
            hint="drop them",
        )
    if spec.workers > 1:
        raise UsageError(f"--workers {spec.workers}: an OpenAI endpoint's requests run in one process")
    served = server.models()  # the server answers, and serves the model asked
    if served and spec.model not in served:
        raise UsageError(f"-m {spec.model}: the server serves {', '.join(served)}", hint="pass one of them with -m")
    if spec.input_data in ("random", "zero"):
        bodies, lengths = openai_bodies(oa, spec.model, spec.streaming, spec.seed)
    elif os.pathsep in spec.input_data:
        raise UsageError("--input-data: one file of request bodies for --service-kind openai")
    else:  # perf_analyzer's openai input file: bodies as written (genai-perf's)
        bodies, lengths = file_bodies(spec.input_data, spec.model, spec.streaming, oa.tokenizer)
    host, port = parse_host_port(server.endpoints.http_url)
    payloads = tuple(openai_request(host, port, oa.path, b, spec.http_headers) for b in bodies)
    intervals = tuple(read_intervals_file(spec.request_intervals_file)) if spec.request_intervals_file else ()
    cfg = StreamConfig(
        host, port, payloads, intervals, seed=spec.seed, max_outstanding=spec.max_outstanding, transport="openai",
        input_lengths=tuple(lengths),
    )  # fmt: skip
    info = server_info(server, "http")
    config = server.model_config(spec.model)
    created = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    asked = [b.get("max_tokens") for b in bodies]

    def record(levels: list[LevelResult], status: str = "ok", error: str | None = None) -> RunRecord:
        rec = make_record(
            spec=spec, command=command, server=info, model_config=config, levels=levels, status=status, error=error,
            created_utc=created,
        )  # fmt: skip
        if record_path is not None:
            rec.save(record_path)
        return rec

    @contextlib.contextmanager
    def measurer() -> Iterator[MeasureOne]:
        with LoadGenerator(cfg) as gen:

            def measure(level: LoadLevel) -> LevelOutcome:
                outcome = measure_level(server, gen, spec, level, [spec.model], None, on_progress, keep_samples=True)
                assert outcome.samples is not None  # keep_samples=True
                samples, mask = outcome.samples
                check = workload_check(samples, mask, asked)
                outcome.result = dataclasses.replace(outcome.result, workload=check)
                outcome.samples = None
                return outcome

            yield measure

    return run_levels(spec, measurer(), record, on_progress)


def workload_check(samples: Samples, in_level: np.ndarray, asked: list[int | None]) -> WorkloadCheck:
    """A level's requests as sent against the server's usage (mask in_level: the level's requests)."""
    n = int(in_level.sum())
    tokens = samples.input_tokens
    rows = tokens[in_level] if tokens is not None else np.full((0, 2), -1, dtype=np.int64)
    sent = rows[:, 0][rows[:, 0] >= 0]
    ok = in_level & (samples.status == STATUS_OK)
    reported_rows = tokens[ok] if tokens is not None else rows[:0]
    reported = reported_rows[reported_rows[:, 1] >= 0]
    out_asked = [a for a in asked if a is not None]
    sent_out = float(np.mean(out_asked)) if out_asked else None
    rep_out = None
    if samples.output_tokens is not None and len(reported):
        rep_out = float(samples.output_tokens[ok][reported_rows[:, 1] >= 0].mean())
    sent_in = float(sent.mean()) if sent.size else None
    rep_in = float(reported[:, 1].mean()) if len(reported) else None
    problems = []
    both = reported[reported[:, 0] >= 0]  # requests whose sent length is known (a file's bodies without a tokenizer)
    if len(both):
        # held per request: the same prompt's two counts (a mean would hide opposite errors)
        allowed = np.maximum(USAGE_TOLERANCE_TOKENS, USAGE_TOLERANCE_REL * both[:, 0])
        off = np.abs(both[:, 1] - both[:, 0]) > allowed
        if off.any():
            problems.append(
                f"the server counted {float(both[:, 1].mean()):.1f} input tokens per request where"
                f" {float(both[:, 0].mean()):.1f} were sent ({int(off.sum())} of {len(both)} requests off by more than"
                f" {USAGE_TOLERANCE_REL:.0%} or {USAGE_TOLERANCE_TOKENS:g} token; a chat template or a BOS token"
                " adds some, another tokenizer counts differently)"
            )
    if (
        rep_out is not None
        and sent_out is not None
        and abs(rep_out - sent_out) > max(USAGE_TOLERANCE_TOKENS, USAGE_TOLERANCE_REL * sent_out)
    ):
        problems.append(
            f"the server generated {rep_out:.1f} output tokens per request where {sent_out:.1f} were asked"
            " (max_tokens with ignore_eos; a server that ignores ignore_eos stops early)"
        )
    if len(reported) == 0 and int(ok.sum()):
        problems.append("the server reported no usage: what it received is not checked")
    return WorkloadCheck(
        requests=n,
        sent_input_tokens_mean=sent_in,
        sent_output_tokens_mean=sent_out,
        reported_requests=len(reported),
        reported_input_tokens_mean=rep_in,
        reported_output_tokens_mean=rep_out,
        mismatch="; ".join(problems),
    )

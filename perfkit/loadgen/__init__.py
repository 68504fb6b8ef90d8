"""Load generator: sends prebuilt requests on schedule and returns raw samples.

Public API: `LoadGenerator` (one or more engines behind one interface), request
building helpers, and `EngineConfig`.

How it is built (each piece a small private module):
  - `_ledger.Ledger`: the record-keeping, and the one place the accounting invariant is
    kept: every request the schedule makes due yields exactly one record (completed,
    failed by kind with a message, dropped, or unfinished at level end).
  - `_loops`: the loop modes. `ClosedLoop` (N in flight, each record triggers the next;
    connection failures back off) and `OpenLoop` (due times from `perfkit.schedule`,
    drops beyond max_outstanding). The clock assumptions are written there.
  - `_transport.Transport`: the narrow interface between loop modes and protocols:
        prepare(closed_loop, share, rate_rps)   async, before a level (warm connections)
        submit(due_ns)                          send one request (due -1 in closed loop)
        abort_in_flight(message)                async, record what is still owed as unfinished
        end_level(closed_loop), close()
    A transport calls `ledger.finish(due, sent, done, status, message)` exactly once per
    submit, then `on_done(status)`; it reports dead connections with
    `ledger.connection_lost()` and their replacements with `ledger.connection_opened()`
    (reconnects per level reach `Samples.reconnects` and `LevelResult.reconnects`).
    Implementations: `_http1.Http1Transport` (hand-written HTTP/1.1),
    `_h2.H2Transport` (hand-written HTTP/2 for unary gRPC, any request size),
    `_grpc_aio.AioTransport` (grpc.aio, the reference). `EngineConfig.transport` picks one.
  - Streaming transports plug in the same way (`_stream_transport.StreamTransport`, given
    a `StreamConfig`): `submit` starts one request (a decoupled call, one step of a
    sequence whose correlation ID the transport keeps in order, or one turn of a replayed
    trace); the request's one record comes with its final response (or failure) through
    `ledger.finish_streamed`, which carries its responses' arrival times and tokens (the
    record stays one). A broken stream fails what it carried, and the next request opens
    its replacement (a reconnect). Implementations: `_stream_h2.H2StreamTransport`
    (ModelStreamInfer on the hand-written HTTP/2 client), `_stream_grpc.AioStreamTransport`
    (the same on grpc.aio), `_stream_sse.SseTransport` (HTTP generate_stream),
    `_stream_sse.HttpSequenceTransport` (sequence steps as plain HTTP infer calls) and
    `_openai.OpenAITransport` (an OpenAI-compatible endpoint, its event stream read by `_sse`;
    prompts of an exact length under the model's tokenizer from `_prompts`).
  - `_mix.MixTransport`: a traffic mix (`EngineConfig.mix_weights`): one transport per model
    behind the Transport interface; each submit draws the next model from a smooth weighted
    round robin (exact over every cycle of the weights' sum), and the model's index is the
    last field of each record (`Samples.model`).
  - `_engine.Engine`: an event loop on its own thread holding one transport, one loop
    mode and one ledger. The engine protocol, shared with `_workers.ProcessEngine` (and
    any other engine, e.g. one on a remote actor):
        start(level, t0_ns, share, worker, workers) -> None
        drain() -> Samples          what was recorded since the last drain
        stop(drain_timeout_s) -> Samples   after it, every request of the level has its record
        close() -> None
  - `_native_engine.NativeEngine`: the same protocol over the compiled sender (`_native*.c`,
    a thread that never takes the GIL) for plain-TCP HTTP/1.1 and unary gRPC of one model,
    and for streamed gRPC requests to decoupled models (no sequences, trace, token count,
    compression or periodic concurrency); `make_engine` picks it where it can carry a config
    (`PERFKIT_SENDER=python`: never).
"""

from __future__ import annotations

import sys
from time import perf_counter_ns

from perfkit.loadgen._engine import Engine, EngineConfig
from perfkit.loadgen._http_json import http_json_payload
from perfkit.loadgen._inputdata import (
    FileRequest,
    build_requests,
    check_synthetic,
    file_tensors,
    read_input_data,
)
from perfkit.loadgen._inputdir import read_sources
from perfkit.loadgen._loops import PeriodicSpec
from perfkit.loadgen._native_engine import NativeEngine, make_engine, native_available
from perfkit.loadgen._prompts import count_tokens, file_bodies, load_tokenizer, openai_bodies, openai_request
from perfkit.loadgen._requests import (
    PARAMETER_TYPES,
    ModelIO,
    RequestParameters,
    ShmBinding,
    Tensor,
    grpc_payload,
    http_payload,
    parameter_values,
    to_wire,
)
from perfkit.loadgen._requests import synthetic_tensors as synthetic_tensors
from perfkit.loadgen._sequences import SequenceSpec
from perfkit.loadgen._stream_sse import http_infer_path, http_sequence_body, sse_payload
from perfkit.loadgen._stream_transport import StreamConfig
from perfkit.loadgen._timer import sleep_until
from perfkit.loadgen._workers import ProcessEngine
from perfkit.recorder import concat
from perfkit.records import LoadLevel, Samples
from perfkit.schedule import split_concurrency

__all__ = [
    "Engine",
    "EngineConfig",
    "FileRequest",
    "LoadGenerator",
    "ModelIO",
    "PARAMETER_TYPES",
    "PeriodicSpec",
    "RequestParameters",
    "SequenceSpec",
    "StreamConfig",
    "ShmBinding",
    "Tensor",
    "build_requests",
    "count_tokens",
    "file_bodies",
    "load_tokenizer",
    "openai_bodies",
    "openai_request",
    "check_synthetic",
    "file_tensors",
    "http_infer_path",
    "http_sequence_body",
    "sse_payload",
    "grpc_payload",
    "http_json_payload",
    "http_payload",
    "make_engine",
    "native_available",
    "parameter_values",
    "read_input_data",
    "read_sources",
    "sleep_until",
    "synthetic_tensors",
    "to_wire",
]

START_LEAD_NS = 50_000_000  # open-loop schedules start this far ahead so every worker is ready
# With the engine in this process, the sender thread shares the GIL with the analysis done
# between windows; CPython hands the GIL over only every 5 ms by default, which shows up as
# late sends. 0.2 ms bounds that delay at a negligible switching cost.
SWITCH_INTERVAL_S = 0.0002


class LoadGenerator:
    """One engine in this process (workers=1) or one per worker process, merged exactly."""

    def __init__(self, cfg: EngineConfig | StreamConfig, workers: int = 1) -> None:
        self.workers = max(1, workers)
        self._engines: list[Engine | NativeEngine] | list[ProcessEngine]
        self._processes: list[ProcessEngine] = []
        self._switch_interval_s: float | None = None
        if isinstance(cfg, StreamConfig):
            # streamed requests (decoupled models, sequences over a stream): one engine in this
            # process (one stream keeps a sequence's steps in order)
            self.workers = 1
            self._engines = [make_engine(cfg)]
        elif self.workers == 1:
            self._switch_interval_s = sys.getswitchinterval()
            sys.setswitchinterval(min(SWITCH_INTERVAL_S, self._switch_interval_s))
            self._engines = [make_engine(cfg)]
        else:
            engines = [ProcessEngine(cfg) for _ in range(self.workers)]
            try:
                for engine in engines:  # spawned together, awaited together
                    engine.wait_ready()
            except BaseException:
                for engine in engines:
                    engine.close()
                raise
            self._engines = self._processes = engines
        self._active: list[int] = []

    def start(self, level: LoadLevel) -> int:
        """Start a level on every engine; returns the level's start time (ns, monotonic)."""
        if level.mode == "concurrency":
            shares = split_concurrency(int(level.value), self.workers)
            t0 = perf_counter_ns()
            self._active = list(range(len(shares)))
            for i, share in enumerate(shares):
                self._engines[i].start(level, t0, share, i, len(shares))
            return t0
        t0 = perf_counter_ns() + START_LEAD_NS
        self._active = list(range(self.workers))
        if self._processes:
            # Every worker gets the start at once and prepares in parallel: started one after
            # the other, the last would begin its share of the schedule late.
            for i, proc in enumerate(self._processes):
                proc.send_start(level, t0, 0, i, self.workers)
            for proc in self._processes:
                proc.wait_ok()
            return t0
        for i in self._active:
            self._engines[i].start(level, t0, 0, i, self.workers)
        return t0

    def start_periodic(self, spec: PeriodicSpec) -> int:
        """Begin perf_analyzer's periodic concurrency (streaming: one engine); returns its start (ns)."""
        if not isinstance(self._engines[0], Engine) or self.workers != 1:
            raise RuntimeError(
                "periodic concurrency runs on one Python streaming engine in this process (StreamConfig.periodic)"
            )
        self._active = [0]
        return self._engines[0].start_periodic(spec)

    def periodic_state(self) -> tuple[int, str, list[tuple[int, int]]]:
        """(when it finished in ns, 0 while it runs; error; [(when_ns, slots)]) of the periodic run."""
        engine = self._engines[0]
        assert isinstance(engine, Engine)
        return engine.periodic_state()

    def drain(self) -> Samples:
        """Everything completed since the last drain, from every engine."""
        return concat([self._engines[i].drain() for i in self._active])

    def stop(self, drain_timeout_s: float = 30.0) -> Samples:
        """Stop sending, wait for requests in flight (bounded), return the rest."""
        out = concat([self._engines[i].stop(drain_timeout_s) for i in self._active])
        self._active = []
        return out

    def close(self) -> None:
        """Release connections, threads and worker processes."""
        for engine in self._engines:
            engine.close()
        if self._switch_interval_s is not None:
            sys.setswitchinterval(self._switch_interval_s)
            self._switch_interval_s = None

    def __enter__(self) -> LoadGenerator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

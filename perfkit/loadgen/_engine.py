"""One engine: an event loop on its own thread, a transport, a loop mode and a ledger.

The public methods (start, drain, stop, close) are called from other threads and run
their work on the loop thread; everything else runs on the loop thread only. This is
the engine protocol that `ProcessEngine` (worker processes) mirrors over a pipe.
"""

from __future__ import annotations

import asyncio
import ctypes
import dataclasses
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any

import numpy as np

from perfkit.loadgen._grpc_aio import AioTransport
from perfkit.loadgen._h2 import H2Transport
from perfkit.loadgen._http1 import Http1Transport
from perfkit.loadgen._ledger import Ledger, Record
from perfkit.loadgen._loops import ClosedLoop, OpenLoop, PeriodicLoop, PeriodicSpec
from perfkit.loadgen._mix import MixTransport, TaggedLedger
from perfkit.loadgen._openai import OpenAITransport
from perfkit.loadgen._stream_grpc import AioStreamTransport
from perfkit.loadgen._stream_h2 import H2StreamTransport
from perfkit.loadgen._stream_parts import stream_samples
from perfkit.loadgen._stream_sse import HttpSequenceTransport, SseTransport
from perfkit.loadgen._stream_transport import StreamConfig, StreamTransport
from perfkit.loadgen._timer import precise_selector
from perfkit.loadgen._transport import Transport
from perfkit.records import LoadLevel, Samples, TlsSpec
from perfkit.schedule import due_times

log = logging.getLogger(__name__)

_PR_SET_TIMERSLACK = 29
SENDER_NICE = -10
TRANSPORTS = ("auto", "native", "http1", "h2", "grpc-aio")
STREAM_TRANSPORTS = {
    "grpc": H2StreamTransport,
    "grpc.aio": AioStreamTransport,
    "sse": SseTransport,
    "http": HttpSequenceTransport,
    "openai": OpenAITransport,
}


@dataclass(frozen=True)
class EngineConfig:
    """Everything a sender needs; picklable so worker processes can rebuild it.

    transport: "auto" (the compiled sender where it is built and can carry cfg, see
    `_native_engine`; else HTTP/1.1 for http, the hand-written HTTP/2 client for grpc), or one
    of "native", "http1" (HTTP/1.1 from Python), "h2" (gRPC from Python), "grpc-aio" explicitly.
    """

    protocol: str  # "http" | "grpc"
    host: str
    port: int
    payloads: tuple[bytes, ...]
    intervals_ns: tuple[int, ...] = ()
    seed: int = 0
    max_outstanding: int = 1000
    transport: str = "auto"
    compression: str = ""  # gRPC message compression ("gzip", "deflate"), hand-written HTTP/2 only
    tls: TlsSpec | None = None  # TLS on every connection (http1 and h2 transports); None: plain TCP
    # perf_analyzer's -H on gRPC requests: metadata (its gRPC Infer takes them,
    # src/client_backend/triton/triton_client_backend.cc); HTTP payloads carry them already
    metadata: tuple[tuple[str, str], ...] = ()
    # A traffic mix (`_mix`): each model's payloads and its weight; each request is drawn for a
    # model by weight and its record carries the model's index. Empty: one model, `payloads`.
    mix_payloads: tuple[tuple[bytes, ...], ...] = ()
    mix_weights: tuple[int, ...] = ()


def make_transport(cfg: EngineConfig | StreamConfig, loop: asyncio.AbstractEventLoop, ledger: Ledger) -> Transport:
    """The transport cfg asks for; raises ValueError for an unknown one."""
    if isinstance(cfg, StreamConfig):
        stream = STREAM_TRANSPORTS.get(cfg.transport)
        if stream is None:
            raise ValueError(
                f"unknown stream transport {cfg.transport!r}; expected one of {', '.join(STREAM_TRANSPORTS)}"
            )
        return stream(loop, ledger, cfg)
    if cfg.mix_weights:
        subs = [
            make_transport(
                dataclasses.replace(cfg, payloads=p, mix_payloads=(), mix_weights=()), loop, TaggedLedger(ledger, i)
            )
            for i, p in enumerate(cfg.mix_payloads)
        ]
        return MixTransport(loop, ledger, subs, cfg.mix_weights, cfg.seed)
    kind = cfg.transport
    if kind == "auto":
        kind = "http1" if cfg.protocol == "http" else "h2"
    if cfg.tls is not None and kind not in ("http1", "h2"):
        raise ValueError(f"transport {kind!r} does not carry TLS; use http1 or h2")
    if kind == "native":
        raise ValueError("transport 'native' carries plain-TCP HTTP/1.1 or unary gRPC of one model (no TLS, no mix)")
    if kind == "http1":
        return Http1Transport(loop, ledger, cfg.payloads, cfg.host, cfg.port, tls=cfg.tls)
    if kind == "h2":
        return H2Transport(
            loop, ledger, cfg.payloads, cfg.host, cfg.port, cfg.compression, tls=cfg.tls, metadata=cfg.metadata
        )
    if kind == "grpc-aio":
        return AioTransport(loop, ledger, cfg.payloads, cfg.host, cfg.port)
    raise ValueError(f"unknown transport {cfg.transport!r}; expected one of {', '.join(TRANSPORTS)}")


def _tighten_timer_slack() -> None:
    # Linux coalesces timer wake-ups by 50 us by default; open-loop sends want precise ones.
    try:
        ctypes.CDLL("libc.so.6").prctl(_PR_SET_TIMERSLACK, 1000, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _raise_priority(open_loop: bool) -> None:
    # The sender thread runs briefly at each due time; on a small machine shared with the
    # server it otherwise waits behind server threads for a CPU and sends late. Where
    # permitted (root or CAP_SYS_NICE) it runs SCHED_FIFO at the lowest real-time priority:
    # it sleeps in epoll between sends, so it preempts on wake-up without starving anyone
    # (and the kernel's real-time throttling caps it anyway); else a lower nice. Best effort.
    tid = threading.get_native_id()
    if not open_loop:
        # A closed loop keeps its thread busy whenever responses arrive: never real-time there.
        try:
            os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
        except (OSError, AttributeError):
            pass
    elif os.environ.get("PERFKIT_NO_REALTIME") != "1":
        try:
            os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(1))
            return
        except (OSError, AttributeError):
            pass
    try:
        os.setpriority(os.PRIO_PROCESS, tid, SENDER_NICE)
    except (OSError, AttributeError):
        pass


class Engine:
    """A load generator on one thread. Methods are called from other threads.

    With a `StreamConfig` it streams (decoupled models, sequences over a stream): its
    Samples then carry each request's response arrival times (and tokens).
    """

    def __init__(self, cfg: EngineConfig | StreamConfig) -> None:
        self.cfg = cfg
        self._streaming = isinstance(cfg, StreamConfig)
        # output tokens counted per request: a declared output tensor's elements, or an OpenAI server's usage
        self._counted = isinstance(cfg, StreamConfig) and (bool(cfg.token_output) or cfg.transport == "openai")
        self._reported = isinstance(cfg, StreamConfig) and cfg.transport == "openai"
        self._mixed = isinstance(cfg, EngineConfig) and bool(cfg.mix_weights)
        self.ledger = Ledger()
        self.loop = asyncio.SelectorEventLoop(precise_selector())
        self.transport = make_transport(cfg, self.loop, self.ledger)
        self.transport.on_done = self._on_done
        self.mode: ClosedLoop | OpenLoop | None = None
        self._thread = threading.Thread(target=self._run, name="perfkit-loadgen", daemon=True)
        self._thread.start()

    # -- thread plumbing -------------------------------------------------------------------------
    def _run(self) -> None:
        _tighten_timer_slack()
        _raise_priority(open_loop=False)
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def _call(self, coro: Any, timeout_s: float | None = None) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self) -> None:
        """Stop the loop and its thread; idempotent."""
        if self.loop.is_closed():
            return
        try:
            self._call(self._shutdown(), 10)
        except Exception:
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self.loop.close()

    async def _shutdown(self) -> None:
        if self.mode is not None:
            self.mode.stop()
        await self.transport.close()

    # -- public API (the engine protocol) --------------------------------------------------------
    def start(self, level: LoadLevel, t0_ns: int, share: float, worker: int = 0, workers: int = 1) -> None:
        """Begin a level: `share` is this engine's concurrency; open loops pace from t0_ns."""
        self._call(self._start(level, t0_ns, share, worker, workers), 60)

    def start_periodic(self, spec: PeriodicSpec) -> int:
        """Begin perf_analyzer's periodic concurrency (a streaming engine only); returns its start (ns)."""
        return int(self._call(self._start_periodic(spec), 60))

    def periodic_state(self) -> tuple[int, str, list[tuple[int, int]]]:
        """(when it finished in ns, 0 while it runs; error; [(when_ns, slots)]) of the periodic run."""
        mode = self.mode
        if not isinstance(mode, PeriodicLoop):
            return 1, "", []
        return mode.finished_ns, mode.error, list(mode.steps_ns)

    def drain(self) -> Samples:
        """Samples recorded since the last drain."""
        return self._samples(self._call(self._swap(), 30))

    def stop(self, drain_timeout_s: float) -> Samples:
        """Stop sending, wait up to drain_timeout_s for requests in flight, return the rest.

        Whatever is still in flight then is recorded as unfinished: after stop, every
        request of the level has its one record.
        """
        return self._samples(self._call(self._stop(drain_timeout_s), drain_timeout_s + 30))

    def _samples(self, swapped: Any) -> Samples:
        if self._streaming:
            records, examples, reconnects, streamed = swapped
            return stream_samples(
                records, examples, reconnects, streamed, counted=self._counted, reported=self._reported
            )
        return _to_samples(*swapped, mixed=self._mixed)

    # -- loop side -------------------------------------------------------------------------------
    def _on_done(self, status: int) -> None:
        if self.mode is not None:
            self.mode.on_done(status)

    async def _swap(self) -> Any:
        return self.ledger.swap_streamed() if self._streaming else self.ledger.swap()

    async def _start(self, level: LoadLevel, t0_ns: int, share: float, worker: int, workers: int) -> None:
        self.ledger.reset()
        closed = level.mode == "concurrency"
        # A streaming open loop parses responses (tokens) all the time: no real-time thread there either.
        _raise_priority(open_loop=not closed and not self._streaming)
        rate_rps = level.value / max(workers, 1) if level.mode == "request_rate" else 0.0
        await self.transport.prepare(closed, int(share), rate_rps)
        if closed:
            self.mode = ClosedLoop(self.transport, self.ledger, self.loop, int(share))
        else:
            if isinstance(self.cfg, StreamConfig) and self.cfg.schedule_ns:
                dues: Iterator[int] = iter(self.cfg.schedule_ns)  # a replayed trace: each entry once
            else:
                dues = due_times(
                    level, seed=self.cfg.seed, worker=worker, workers=workers, intervals_ns=self.cfg.intervals_ns
                )
            self.mode = OpenLoop(self.transport, self.ledger, self.loop, dues, t0_ns, self.cfg.max_outstanding)
        self.mode.start()

    async def _start_periodic(self, spec: PeriodicSpec) -> int:
        transport = self.transport
        assert isinstance(transport, StreamTransport), "periodic concurrency streams (a StreamConfig engine)"
        self.ledger.reset()
        _raise_priority(open_loop=False)
        await transport.prepare(True, spec.end, 0.0)
        self.mode = PeriodicLoop(transport, self.ledger, self.loop, spec)
        t0 = perf_counter_ns()
        self.mode.start()
        return t0

    async def _stop(self, drain_timeout_s: float) -> Any:
        mode, ledger = self.mode, self.ledger
        if mode is not None:
            mode.stop()
        await self.transport.drain(self.loop.time() + drain_timeout_s)
        if ledger.in_flight > 0:
            await self.transport.abort_in_flight(f"still in flight after {drain_timeout_s:g} s")
        if ledger.in_flight != 0:  # the invariant is broken: a bug in a transport, say so loudly
            log.error("load generator: %d requests without a record at the end of a level", ledger.in_flight)
            ledger.in_flight = 0
        self.transport.end_level(isinstance(mode, ClosedLoop))
        return await self._swap()


def _to_samples(records: list[Record], examples: dict[int, str], reconnects: int, *, mixed: bool = False) -> Samples:
    if records:
        arr = np.array(records, dtype=np.int64)
        model = arr[:, 4].astype(np.int16) if mixed else None
        return Samples(
            arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3].astype(np.int32), examples, reconnects=reconnects, model=model
        )
    empty = np.empty(0, dtype=np.int64)
    model = np.empty(0, dtype=np.int16) if mixed else None
    return Samples(empty, empty, empty, np.empty(0, dtype=np.int32), examples, reconnects=reconnects, model=model)

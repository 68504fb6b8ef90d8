"""The engine protocol over the compiled sender (`_native.c`, the Python type over the core in
`_native_core.c`; its protocols `_native_http1.c`: HTTP/1.1; `_native_h2_unary.c`: unary gRPC;
`_native_h2_stream.c`: streamed gRPC requests on one ModelStreamInfer stream).

Same behaviour as `_engine.Engine` with `_http1.Http1Transport` (HTTP) or `_h2.H2Transport`
(gRPC: the same header block, message framing and connections) and the `_loops` modes (one
record per request made due, the same statuses and messages, closed-loop backoff after a
connection failure, open-loop drops past max outstanding, warm and spare connections in open
loop), with the send/receive/record loop in C on a thread that never takes the GIL. Python
keeps what is not per request: the open loop's due times (`perfkit.schedule`, fed to the
sender in chunks by a feeder thread, so a schedule is the same whichever engine runs it) and
turning records into `Samples`.

It carries plain-TCP HTTP/1.1 and unary gRPC requests of one model (gRPC compression and
metadata included: they are in the header block and the messages), and streamed requests to
decoupled models over gRPC (`_stream_h2.H2StreamTransport`'s stream: the same header block,
metadata included, and request bytes; each record comes with its responses' arrival times).
TLS, traffic mixes, sequences, trace replay, token counting, compressed streams and periodic
concurrency stay on the Python engine (`eligible`).
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import sysconfig
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from perfkit.loadgen._engine import Engine, EngineConfig
from perfkit.loadgen._h2 import GRPC_INFER, H2_CONNECTIONS, grpc_message, header_block
from perfkit.loadgen._stream_grpc import STREAM_INFER
from perfkit.loadgen._stream_h2 import stream_open_error
from perfkit.loadgen._stream_parts import request_suffix
from perfkit.loadgen._stream_transport import StreamConfig
from perfkit.records import (
    GRPC_STATUS_BASE,
    STATUS_CONNECTION_CLOSED,
    STATUS_CONNECTION_REFUSED,
    STATUS_DROPPED,
    STATUS_PROTOCOL,
    STATUS_STREAM_ERROR,
    STATUS_UNFINISHED,
    LoadLevel,
    Samples,
)
from perfkit.schedule import due_times

log = logging.getLogger(__name__)
_warned = False

# One record per request as the C sender writes it (its record_t)
RECORD = np.dtype([("due", "<i8"), ("sent", "<i8"), ("done", "<i8"), ("status", "<i4"), ("model", "<i4")])


def not_built_reason(err: ImportError, folder: Path, suffix: str) -> str:
    """Why the compiled sender did not import, in words a user can act on: no build for this
    Python (a checkout built under another one names a circular import otherwise), or the
    loader's own words for a build that is there but fails to load."""
    if (folder / f"_native{suffix}").exists():
        return str(err)
    others = sorted(p.name for p in folder.glob("_native.*.so"))
    found = f" (found only {', '.join(others)})" if others else ""
    return f"no _native{suffix} for this Python{found}: reinstall perfkit (pip install .) to build it"


try:
    from perfkit.loadgen import _native  # type: ignore[attr-defined]  # a C extension: mypy sees no stub for it
except ImportError as err:  # not built (no C compiler at install, or not Linux): the Python engine sends
    _native = None
    NATIVE_IMPORT_ERROR = not_built_reason(err, Path(__file__).parent, sysconfig.get_config_var("EXT_SUFFIX") or ".so")
else:
    NATIVE_IMPORT_ERROR = ""
    if RECORD.itemsize != _native.RECORD_BYTES:  # a stale build: its records would be misread
        NATIVE_IMPORT_ERROR = f"its records are {_native.RECORD_BYTES} bytes, perfkit reads {RECORD.itemsize}: rebuild"
        _native = None


# The open loop's due times are handed over this many seconds ahead (at least FEED_MIN at a time);
# the feeder tops them up when fewer than half are left.
FEED_AHEAD_S = 0.5
FEED_MIN = 256
FEED_WAIT_S = 0.5


def native_available() -> bool:
    """Whether the compiled sender was built and imports here."""
    return _native is not None


def eligible(cfg: object) -> bool:
    """Whether the compiled sender can carry cfg: plain-TCP HTTP/1.1 or gRPC, one model, unary; or
    streamed gRPC requests (a decoupled model) with no sequences, trace, token count, compression
    or periodic concurrency."""
    if isinstance(cfg, StreamConfig):
        return (
            cfg.transport == "grpc"
            and cfg.sequences is None
            and not cfg.schedule_ns
            and not cfg.token_output
            and not cfg.compression
            and not cfg.periodic
        )
    return (
        isinstance(cfg, EngineConfig)
        and cfg.protocol in ("http", "grpc")
        and cfg.transport in ("auto", "native")
        and cfg.tls is None
        and not cfg.mix_weights
    )


def make_engine(cfg: EngineConfig | StreamConfig) -> Engine | NativeEngine:
    """The engine for cfg: the compiled sender where it can carry cfg (and PERFKIT_SENDER is not
    "python"), else the Python engine."""
    global _warned
    if eligible(cfg) and os.environ.get("PERFKIT_SENDER") != "python":
        if _native is not None:
            return NativeEngine(cfg)
        if isinstance(cfg, EngineConfig) and cfg.transport == "native":
            raise ValueError(f"transport 'native': perfkit's compiled sender is not built ({NATIVE_IMPORT_ERROR})")
        if not _warned:
            _warned = True
            log.warning("perfkit's compiled sender is not built (%s): sending from Python", NATIVE_IMPORT_ERROR)
    return Engine(cfg)


class NativeEngine:
    """The engine protocol (start, drain, stop, close) on the compiled sender."""

    def __init__(self, cfg: EngineConfig | StreamConfig) -> None:
        if _native is None:
            raise RuntimeError(f"perfkit's compiled sender is not built: {NATIVE_IMPORT_ERROR}")
        self.cfg = cfg
        statuses = (STATUS_CONNECTION_CLOSED, STATUS_CONNECTION_REFUSED, STATUS_PROTOCOL, STATUS_UNFINISHED,
                    STATUS_DROPPED, GRPC_STATUS_BASE, STATUS_STREAM_ERROR)  # fmt: skip
        self._streaming = isinstance(cfg, StreamConfig)
        self._grpc = isinstance(cfg, StreamConfig) or cfg.protocol == "grpc"
        if isinstance(cfg, StreamConfig):
            # as H2StreamTransport: one connection, one stream, the same header block (metadata
            # included); payloads are ModelInferRequests, each sent with the id and final-response
            # flag the sender appends (request_suffix: field 3, then what follows it)
            block = header_block(f"{cfg.host}:{cfg.port}", STREAM_INFER, metadata=cfg.headers)
            self._core = _native.Http1Core(
                cfg.host, cfg.port, cfg.payloads, statuses, grpc_block=block, h2_connections=1,
                stream_suffix=request_suffix("")[2:],
            )  # fmt: skip
        elif cfg.protocol == "grpc":
            # as H2Transport: messages framed (and compressed) once, one stateless header block
            messages = tuple(grpc_message(p, cfg.compression) for p in cfg.payloads)
            block = header_block(f"{cfg.host}:{cfg.port}", GRPC_INFER, cfg.compression, metadata=cfg.metadata)
            self._core = _native.Http1Core(
                cfg.host, cfg.port, messages, statuses, grpc_block=block, h2_connections=H2_CONNECTIONS
            )
        else:
            self._core = _native.Http1Core(cfg.host, cfg.port, cfg.payloads, statuses)
        self._feeder: threading.Thread | None = None
        self._reached = False

    def start(self, level: LoadLevel, t0_ns: int, share: float, worker: int = 0, workers: int = 1) -> None:
        """Begin a level: `share` is this engine's concurrency; open loops pace from t0_ns."""
        self._join_feeder()
        if isinstance(self.cfg, StreamConfig) and not self._reached:
            # as H2StreamTransport before its first level: an unreachable server is an error, not
            # a level of refused requests
            try:
                socket.create_connection((self.cfg.host, self.cfg.port), timeout=10).close()
            except OSError as err:
                raise stream_open_error(self.cfg, err) from None
            self._reached = True
        if level.mode == "concurrency":
            self._core.start_closed(int(share))
            return
        rate_rps = level.value / max(workers, 1) if level.mode == "request_rate" else 0.0
        dues = due_times(level, seed=self.cfg.seed, worker=worker, workers=workers, intervals_ns=self.cfg.intervals_ns)
        chunk = max(FEED_MIN, int(rate_rps * FEED_AHEAD_S))
        first, ended = _take(dues, chunk)
        # as Http1Transport.prepare: connections kept warm and spare ahead of need (gRPC: a few
        # connections carry every stream, opened by the sender)
        warm = 0 if self._grpc else max(4, int(rate_rps * 0.005) + 2)
        spare = 0 if self._grpc else 4 + int(rate_rps * 0.02)
        message = f"{self.cfg.max_outstanding} requests already in flight (max outstanding)"
        # a streaming open loop reads responses all the time: no real-time thread there (as Engine)
        realtime = os.environ.get("PERFKIT_NO_REALTIME") != "1" and not self._streaming
        self._core.start_open(t0_ns, first, ended, warm, spare, self.cfg.max_outstanding, realtime, chunk // 2, message)
        if not ended:
            self._feeder = threading.Thread(
                target=self._feed, args=(dues, chunk), name="perfkit-native-feeder", daemon=True
            )
            self._feeder.start()

    def _feed(self, dues: Iterator[int], chunk: int) -> None:
        while True:
            wants_dues = self._core.wait_for_demand(FEED_WAIT_S)
            if wants_dues is False:
                return
            if wants_dues:
                more, ended = _take(dues, chunk)
                self._core.feed(more, ended)
                if ended:
                    return

    def _join_feeder(self) -> None:
        if self._feeder is not None:
            self._feeder.join()
            self._feeder = None

    def drain(self) -> Samples:
        """Samples recorded since the last drain."""
        return _to_samples(*self._core.swap())

    def stop(self, drain_timeout_s: float) -> Samples:
        """Stop sending, wait up to drain_timeout_s for requests in flight, return the rest
        (what is still in flight then is recorded as unfinished)."""
        swapped = self._core.stop(drain_timeout_s, f"still in flight after {drain_timeout_s:g} s")
        self._join_feeder()
        return _to_samples(*swapped)

    def close(self) -> None:
        """Close every connection and end the sender thread; idempotent."""
        self._core.close()
        self._join_feeder()


def _take(dues: Iterator[int], n: int) -> tuple[bytes, bool]:
    """The next n due offsets as int64 bytes, and whether the schedule ended."""
    arr = np.fromiter(itertools.islice(dues, n), dtype=np.int64, count=-1)
    return arr.tobytes(), len(arr) < n


def _to_samples(
    raw: bytes, examples: dict[int, str], reconnects: int, counts: bytes | None = None, times: bytes | None = None
) -> Samples:
    """Samples of the records; streaming (counts and times given): with each request's responses'
    arrival times, as `_stream_parts.stream_samples` makes them."""
    rec = np.frombuffer(raw, dtype=RECORD)
    response_ns = None
    if counts is not None and times is not None:
        per_record = np.frombuffer(counts, dtype=np.uint32)
        flat = np.frombuffer(times, dtype=np.int64)
        if len(per_record) != len(rec) or int(per_record.sum()) != len(flat):
            raise RuntimeError("the compiled sender's response times do not match its records")
        response_ns = np.empty(len(rec), dtype=object)
        bounds = np.cumsum(per_record, dtype=np.int64)
        for i, part in enumerate(np.split(flat, bounds[:-1]) if len(rec) else ()):
            response_ns[i] = part.copy()
    return Samples(
        rec["due"].copy(),
        rec["sent"].copy(),
        rec["done"].copy(),
        rec["status"].astype(np.int32),
        examples,
        response_ns=response_ns,
        reconnects=reconnects,
    )

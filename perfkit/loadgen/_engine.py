"""The hot path: an event loop on its own thread sending prebuilt requests.

HTTP goes through a hand-written HTTP/1.1 protocol on raw asyncio transports (one
connection per request in flight, bytes built once); gRPC goes through grpc.aio
with raw-bytes (de)serializers so no protobuf work happens per request. Each
completion appends one tuple (due, sent, done, status) to a list that only the loop
thread touches; drain() swaps it out on the loop thread.
"""

from __future__ import annotations

import asyncio
import collections
import ctypes
import itertools
import os
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any

import numpy as np

from perfkit.loadgen._h2 import MAX_FAST_PAYLOAD, H2Conn, grpc_message, header_block
from perfkit.loadgen._timer import precise_selector
from perfkit.records import (
    GRPC_STATUS_BASE,
    STATUS_CONNECTION_CLOSED,
    STATUS_CONNECTION_REFUSED,
    STATUS_DROPPED,
    STATUS_PROTOCOL,
    STATUS_UNFINISHED,
    LoadLevel,
    Samples,
)
from perfkit.schedule import due_times

_PR_SET_TIMERSLACK = 29
SENDER_NICE = -10
_GRPC_INFER = "/inference.GRPCInferenceService/ModelInfer"
H2_CONNECTIONS = 2  # HTTP/2 connections per engine (closed loop: at most one per request in flight)


@dataclass(frozen=True)
class EngineConfig:
    """Everything a sender needs; picklable so worker processes can rebuild it."""

    protocol: str  # "http" | "grpc"
    host: str
    port: int
    payloads: tuple[bytes, ...]
    intervals_ns: tuple[int, ...] = ()
    seed: int = 0
    max_outstanding: int = 1000


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


class _HttpConn(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection carrying one request at a time."""

    __slots__ = ("buf", "code", "due", "eng", "need", "sent", "transport")

    def __init__(self, eng: Engine) -> None:
        self.eng = eng
        self.buf = bytearray()
        self.need = -1
        self.code = 0
        self.sent = -1
        self.due = -1
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(self, payload: bytes, due: int) -> None:
        self.due = due
        self.sent = perf_counter_ns()
        self.transport.write(payload)

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        if self.need < 0:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(buf[:end])
            # "\r\n" first: Triton also sends Inference-Header-Content-Length
            i = head.find(b"\r\nContent-Length: ")
            if i < 0:
                i = head.lower().find(b"\r\ncontent-length:")
                if i < 0:
                    self._finish(STATUS_PROTOCOL, perf_counter_ns(), head[:200].decode(errors="replace"))
                    return
                i += 17
            else:
                i += 18
            j = head.find(b"\r\n", i)
            self.need = end + 4 + int(head[i : j if j > 0 else len(head)])
            self.code = int(head[9:12])
        if len(buf) < self.need:
            return
        done = perf_counter_ns()
        code = self.code
        message = ""
        if code != 200:
            message = bytes(buf[self.need - min(300, self.need) : self.need]).decode(errors="replace")
        del buf[: self.need]
        self.need = -1
        self._finish(0 if code == 200 else code, done, message)

    def _finish(self, status: int, done: int, message: str) -> None:
        eng = self.eng
        eng.records.append((self.due, self.sent, done, status))
        if status and status not in eng.error_examples:
            eng.error_examples[status] = message
        self.sent = -1
        eng.outstanding -= 1
        eng.on_idle(self)

    def connection_lost(self, exc: Exception | None) -> None:
        eng = self.eng
        eng.conns.discard(self)
        if self.sent >= 0:
            eng.records.append((self.due, self.sent, perf_counter_ns(), STATUS_CONNECTION_CLOSED))
            eng.error_examples.setdefault(STATUS_CONNECTION_CLOSED, str(exc or "server closed the connection"))
            self.sent = -1
            eng.outstanding -= 1
            if eng.active and eng.closed_loop:
                eng.loop.call_later(0.05, eng.spawn_closed_slot)


class Engine:
    """A load generator on one thread. Methods are called from other threads."""

    def __init__(self, cfg: EngineConfig) -> None:
        self.cfg = cfg
        self.records: list[tuple[int, int, int, int]] = []
        self.error_examples: dict[int, str] = {}
        self.active = False
        self.closed_loop = True
        self.outstanding = 0
        self.conns: set[_HttpConn] = set()
        self.idle: list[_HttpConn] = []
        self.pending: collections.deque[int] = collections.deque()
        self._payload_iter: Iterator[bytes] = itertools.cycle(cfg.payloads)
        self._single = cfg.payloads[0] if len(cfg.payloads) == 1 else None
        self._dues: Iterator[int] | None = None
        self._t0 = 0
        self._worker = 0
        self._workers = 1
        self._next_due = 0
        self._grpc_call: Any = None
        self._grpc_channel: Any = None
        self._tasks: set[asyncio.Future[Any]] = set()
        self._opening = 0
        self._spare_target = 2
        # gRPC: the hand-written HTTP/2 path when every request fits one frame, else grpc.aio
        self._h2 = cfg.protocol == "grpc" and all(len(p) <= MAX_FAST_PAYLOAD for p in cfg.payloads)
        self._h2_conns: list[H2Conn] = []
        self._h2_rr = 0
        if self._h2:
            self._payload_iter = itertools.cycle([grpc_message(p) for p in cfg.payloads])
            self._single = grpc_message(cfg.payloads[0]) if len(cfg.payloads) == 1 else None
            self._h2_block = header_block(f"{cfg.host}:{cfg.port}", _GRPC_INFER)
        self.loop = asyncio.SelectorEventLoop(precise_selector())
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
        self.active = False
        await self._cancel_tasks()
        for conn in list(self.conns):
            if conn.transport is not None:
                conn.transport.abort()
        for h2 in self._h2_conns:
            if h2.transport is not None:
                h2.transport.abort()
        if self._grpc_channel is not None:
            await self._grpc_channel.close()
            self._grpc_channel = None

    # -- public API ------------------------------------------------------------------------------
    def start(self, level: LoadLevel, t0_ns: int, share: float, worker: int = 0, workers: int = 1) -> None:
        """Begin a level: `share` is this engine's concurrency; open loops pace from t0_ns."""
        self._call(self._start(level, t0_ns, share, worker, workers), 60)

    def drain(self) -> Samples:
        """Samples completed since the last drain."""
        records, examples = self._call(self._swap(), 30)
        return _to_samples(records, examples)

    def stop(self, drain_timeout_s: float) -> Samples:
        """Stop sending, wait up to drain_timeout_s for requests in flight, return the rest."""
        records, examples = self._call(self._stop(drain_timeout_s), drain_timeout_s + 30)
        return _to_samples(records, examples)

    # -- loop side -------------------------------------------------------------------------------
    async def _swap(self) -> tuple[list[tuple[int, int, int, int]], dict[int, str]]:
        records, self.records = self.records, []
        examples, self.error_examples = self.error_examples, {}
        return records, examples

    async def _start(self, level: LoadLevel, t0_ns: int, share: float, worker: int, workers: int) -> None:
        self.records = []
        self.error_examples = {}
        self.outstanding = 0
        self.pending.clear()
        self.closed_loop = level.mode == "concurrency"
        _raise_priority(open_loop=not self.closed_loop)
        self._worker, self._workers, self._t0 = worker, workers, t0_ns
        if self._h2:
            await self._h2_start(level, share)
            return
        if self.cfg.protocol == "grpc" and self._grpc_channel is None:
            import grpc.aio

            self._grpc_channel = grpc.aio.insecure_channel(
                f"{self.cfg.host}:{self.cfg.port}",
                options=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)],
            )
            self._grpc_call = self._grpc_channel.unary_unary(_GRPC_INFER)
            await self._grpc_channel.channel_ready()
        self.active = True
        if self.closed_loop:
            for _ in range(int(share)):
                self.spawn_closed_slot()
            return
        self._dues = due_times(
            level, seed=self.cfg.seed, worker=worker, workers=workers, intervals_ns=self.cfg.intervals_ns
        )
        if self.cfg.protocol == "http":
            rate = level.value / max(workers, 1)
            self._spare_target = 4 + int(rate * 0.02)
            warm = min(self.cfg.max_outstanding, max(4, int(rate * 0.005) + 2))
            await asyncio.gather(*(self._open_conn() for _ in range(max(0, warm - len(self.idle)))))
        self._t0 = t0_ns
        self._next_due = t0_ns + next(self._dues)
        self.loop.call_at(self._next_due / 1e9, self._tick)

    # gRPC over the hand-written HTTP/2 protocol
    async def _h2_open(self) -> H2Conn | None:
        try:
            _, conn = await self.loop.create_connection(
                lambda: H2Conn(self._h2_block, self._h2_done, self.error_examples), self.cfg.host, self.cfg.port
            )
        except OSError as err:
            self.error_examples.setdefault(STATUS_CONNECTION_REFUSED, str(err))
            return None
        self._h2_conns.append(conn)
        return conn

    async def _h2_start(self, level: LoadLevel, share: float) -> None:
        self._h2_conns = [c for c in self._h2_conns if not c.closed]
        want = max(1, min(int(share), H2_CONNECTIONS)) if self.closed_loop else H2_CONNECTIONS
        while len(self._h2_conns) < want:
            if await self._h2_open() is None:
                break
        self.active = True
        if self.closed_loop:
            for i in range(int(share)):
                if self._h2_conns:
                    self.outstanding += 1
                    self._h2_conns[i % len(self._h2_conns)].send(self._next_payload(), -1)
                else:
                    self.spawn_closed_slot()
            return
        self._dues = due_times(
            level, seed=self.cfg.seed, worker=self._worker, workers=self._workers, intervals_ns=self.cfg.intervals_ns
        )
        self._next_due = self._t0 + next(self._dues)
        self.loop.call_at(self._next_due / 1e9, self._tick)

    def _h2_done(self, conn: H2Conn, due: int, sent: int, done: int, status: int) -> None:
        self.records.append((due, sent, done, status))
        self.outstanding -= 1
        if status and status not in self.error_examples:
            self.error_examples[status] = "gRPC call failed"
        if self.active and self.closed_loop:
            if conn.closed:
                if conn in self._h2_conns:
                    self._h2_conns.remove(conn)
                self.loop.call_later(0.05, self.spawn_closed_slot)
            else:
                self.outstanding += 1
                conn.send(self._next_payload(), -1)

    async def _h2_closed_slot(self) -> None:
        conns = [c for c in self._h2_conns if not c.closed]
        conn = conns[0] if conns else None
        while self.active and conn is None:
            now = perf_counter_ns()
            conn = await self._h2_open()
            if conn is None:
                self.records.append((-1, now, perf_counter_ns(), STATUS_CONNECTION_REFUSED))
                await asyncio.sleep(0.05)
        if conn is not None and self.active:
            self.outstanding += 1
            conn.send(self._next_payload(), -1)

    async def _cancel_tasks(self) -> None:
        # Cancelled tasks must run to their end before the loop stops, or asyncio warns
        # "Task was destroyed but it is pending" at exit.
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def _next_payload(self) -> bytes:
        return self._single if self._single is not None else next(self._payload_iter)

    async def _open_conn(self) -> _HttpConn | None:
        try:
            _, conn = await self.loop.create_connection(lambda: _HttpConn(self), self.cfg.host, self.cfg.port)
        except OSError as err:
            self.error_examples.setdefault(STATUS_CONNECTION_REFUSED, str(err))
            return None
        self.conns.add(conn)
        self.idle.append(conn)
        return conn

    # closed loop
    def spawn_closed_slot(self) -> None:
        if not self.active:
            return
        task = self.loop.create_task(self._closed_slot_start())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _closed_slot_start(self) -> None:
        if self._h2:
            await self._h2_closed_slot()
            return
        if self.cfg.protocol == "grpc":
            await self._grpc_closed_slot()
            return
        conn = None
        while self.active and conn is None:
            now = perf_counter_ns()
            conn = await self._open_conn()
            if conn is None:
                self.records.append((-1, now, perf_counter_ns(), STATUS_CONNECTION_REFUSED))
                await asyncio.sleep(0.05)
        if conn is None:
            return
        self.idle.remove(conn)
        self.outstanding += 1
        conn.send(self._next_payload(), -1)

    def on_idle(self, conn: _HttpConn) -> None:
        if self.active:
            if self.closed_loop:
                self.outstanding += 1
                conn.send(self._next_payload(), -1)
                return
            if self.pending:
                self.outstanding += 1
                conn.send(self._next_payload(), self.pending.popleft())
                return
        self.idle.append(conn)

    async def _grpc_closed_slot(self) -> None:
        call = self._grpc_call
        records = self.records
        while self.active:
            payload = self._next_payload()
            self.outstanding += 1
            sent = perf_counter_ns()
            try:
                await call(payload)
                status = 0
            except Exception as err:  # grpc.aio.AioRpcError, or the channel closing
                status = _grpc_status(err, self.error_examples)
            done = perf_counter_ns()
            self.outstanding -= 1
            if records is not self.records:
                records = self.records
            records.append((-1, sent, done, status))
            if status:
                await asyncio.sleep(0.001 if status != GRPC_STATUS_BASE + 14 else 0.05)

    # open loop
    def _tick(self) -> None:
        if not self.active or self._dues is None:
            return
        now = perf_counter_ns()
        due = self._next_due
        while due <= now:
            self._dispatch(due)
            due = self._t0 + next(self._dues)
            if due > now:
                now = perf_counter_ns()
        self._next_due = due
        self.loop.call_at(due / 1e9, self._tick)

    def _dispatch(self, due: int) -> None:
        if self.outstanding + len(self.pending) >= self.cfg.max_outstanding:
            self.records.append((due, -1, perf_counter_ns(), STATUS_DROPPED))
            return
        if self._h2:
            conns = self._h2_conns
            if conns:
                self._h2_rr += 1
                self.outstanding += 1
                conns[self._h2_rr % len(conns)].send(self._next_payload(), due)
            else:
                self.records.append((due, -1, perf_counter_ns(), STATUS_CONNECTION_REFUSED))
            return
        if self.cfg.protocol == "grpc":
            self.outstanding += 1
            task = self.loop.create_task(self._grpc_one(due))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return
        if self.idle:
            conn = self.idle.pop()
            self.outstanding += 1
            conn.send(self._next_payload(), due)
        else:
            self.pending.append(due)
            self._spawn(self._open_for_pending())
        # Keep spare connections open ahead of need: a send that must first connect is late.
        if len(self.idle) + self._opening < self._spare_target:
            self._opening += 1
            self._spawn(self._open_spare())

    def _spawn(self, coro: Any) -> None:
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _open_spare(self) -> None:
        try:
            conn = await self._open_conn()
        finally:
            self._opening -= 1
        if conn is not None and self.pending:
            self.idle.remove(conn)
            self.on_idle(conn)

    async def _open_for_pending(self) -> None:
        conn = await self._open_conn()
        if conn is None:
            if self.pending:
                due = self.pending.popleft()
                self.records.append((due, -1, perf_counter_ns(), STATUS_CONNECTION_REFUSED))
            return
        self.idle.remove(conn)
        self.on_idle(conn)

    async def _grpc_one(self, due: int) -> None:
        sent = perf_counter_ns()
        try:
            await self._grpc_call(self._next_payload())
            status = 0
        except Exception as err:
            status = _grpc_status(err, self.error_examples)
        self.outstanding -= 1
        self.records.append((due, sent, perf_counter_ns(), status))

    async def _stop(self, drain_timeout_s: float) -> tuple[list[tuple[int, int, int, int]], dict[int, str]]:
        self.active = False
        deadline = perf_counter_ns() + int(drain_timeout_s * 1e9)
        while self.pending:
            self.records.append((self.pending.popleft(), -1, perf_counter_ns(), STATUS_DROPPED))
        while self.outstanding > 0 and perf_counter_ns() < deadline:
            await asyncio.sleep(0.002)
        if self.outstanding > 0:
            now = perf_counter_ns()
            for conn in list(self.conns):
                if conn.sent >= 0:
                    self.records.append((conn.due, conn.sent, now, STATUS_UNFINISHED))
                    conn.sent = -1
                    conn.transport.abort()
            for h2 in list(self._h2_conns):
                for due, sent in h2.streams.values():
                    self.records.append((due, sent, now, STATUS_UNFINISHED))
                h2.streams.clear()
                if h2.transport is not None:
                    h2.transport.abort()
            await self._cancel_tasks()
            self.error_examples.setdefault(STATUS_UNFINISHED, f"still in flight after {drain_timeout_s:g} s")
            self.outstanding = 0
        if self.closed_loop:
            # closed-loop connections are per level; open-loop ones are kept warm across levels
            for conn in list(self.conns):
                conn.transport.close()
            self.idle.clear()
        return await self._swap()


def _grpc_status(err: Exception, examples: dict[int, str]) -> int:
    code = getattr(err, "code", None)
    try:
        status = GRPC_STATUS_BASE + int(code().value[0]) if callable(code) else STATUS_CONNECTION_CLOSED
    except Exception:
        status = STATUS_CONNECTION_CLOSED
    if status not in examples:
        details = getattr(err, "details", None)
        examples[status] = str(details() if callable(details) else err)[:300]
    return status


def _to_samples(records: list[tuple[int, int, int, int]], examples: dict[int, str]) -> Samples:
    if records:
        arr = np.array(records, dtype=np.int64)
        return Samples(arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3].astype(np.int32), examples)
    empty = np.empty(0, dtype=np.int64)
    return Samples(empty, empty, empty, np.empty(0, dtype=np.int32), examples)

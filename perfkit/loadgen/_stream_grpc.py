"""Streamed requests over gRPC ModelStreamInfer (decoupled models, and sequences over a stream).

One bidirectional stream per engine carries every request; responses are matched to
requests by the request `id`, which is appended to the prebuilt request bytes as one
more protobuf field (a later field of the same number wins, so no re-serialization).
Each request also asks for `triton_enable_empty_final_response`, so every request ends
with a response whose `triton_final_response` parameter is true, empty or not: that
is the request's completion time. Each non-empty response's arrival is timestamped
(one per token for an LLM-style model).

Runs on its own thread and event loop, with the engine protocol the measure stage uses
(start / drain / stop / close returning Samples).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any

from perfkit.loadgen._sequences import SequenceManager, SequenceSpec
from perfkit.loadgen._stream_parts import _Req, _to_samples, _Trace, request_suffix
from perfkit.loadgen._timer import precise_selector
from perfkit.records import (
    GRPC_STATUS_BASE,
    STATUS_CONNECTION_CLOSED,
    STATUS_DROPPED,
    STATUS_STREAM_ERROR,
    STATUS_UNFINISHED,
    LoadLevel,
    Samples,
)
from perfkit.schedule import due_times

_STREAM_INFER = "/inference.GRPCInferenceService/ModelStreamInfer"
_FINAL = "triton_final_response"


@dataclass(frozen=True)
class StreamConfig:
    """Everything the stream engine needs; picklable."""

    host: str
    port: int
    payloads: tuple[bytes, ...]  # serialized ModelInferRequest, without id
    intervals_ns: tuple[int, ...] = ()
    seed: int = 0
    max_outstanding: int = 1000
    sequences: SequenceSpec | None = None  # sequence (stateful) model: IDs and flags per request
    # "grpc": ModelStreamInfer on the hand-written HTTP/2 client; "grpc.aio": the same on
    # grpc.aio (slower, kept as a reference); "sse": HTTP generate_stream.
    transport: str = "grpc"
    # Trace replay: request k is due schedule_ns[k] after the start and sends payloads[k], once.
    # sessions[k] >= 0 groups requests into a session whose turns go one at a time, in order
    # (a sequence, with start/end flags, on a sequence model).
    schedule_ns: tuple[int, ...] = ()
    sessions: tuple[int, ...] = ()
    token_output: str = ""  # count tokens as this output tensor's elements (gRPC only)
    http_path: str = ""  # transport "http": the infer path the sequence engine posts to


class StreamEngine:
    """Streams requests on one gRPC bidirectional stream, closed or open loop."""

    def __init__(self, cfg: StreamConfig) -> None:
        from tritonclient.grpc import service_pb2

        self.cfg = cfg
        self._parse = service_pb2.ModelStreamInferResponse.FromString
        self.records: list[tuple[int, int, int, int, list[int], int]] = []
        self.error_examples: dict[int, str] = {}
        self.active = False
        self.closed_loop = True
        self.inflight: dict[str, _Req] = {}
        self._ids = itertools.count()
        self._payloads = itertools.cycle(range(len(cfg.payloads)))
        self._channel: Any = None
        self._call: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._writer: asyncio.Task[None] | None = None
        self._outq: asyncio.Queue[bytes] = asyncio.Queue()
        self._dues: Iterator[int] | None = None
        self._t0 = 0
        self._next_due = 0
        self._seq: SequenceManager | None = None
        self._seq_rr = 0
        self._pending: collections.deque[int] = collections.deque()
        self._trace: _Trace | None = None
        self.loop = asyncio.SelectorEventLoop(precise_selector())
        self._thread = threading.Thread(target=self._run, name="perfkit-stream", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def _sync(self, coro: Any, timeout_s: float | None) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    # -- engine protocol --------------------------------------------------------------------
    def start(self, level: LoadLevel, t0_ns: int, share: float, worker: int = 0, workers: int = 1) -> None:
        """Begin a level: `share` is the concurrency (closed loop); open loops pace from t0_ns."""
        self._sync(self._start(level, t0_ns, share, worker, workers), 60)

    def drain(self) -> Samples:
        """Samples of requests completed since the last drain."""
        records, examples = self._sync(self._swap(), 30)
        return _to_samples(records, examples, counted=bool(self.cfg.token_output))

    def stop(self, drain_timeout_s: float) -> Samples:
        """Stop sending, wait up to drain_timeout_s for requests in flight, return the rest."""
        records, examples = self._sync(self._stop(drain_timeout_s), drain_timeout_s + 30)
        return _to_samples(records, examples, counted=bool(self.cfg.token_output))

    def close(self) -> None:
        """Close the stream, the channel and the thread; idempotent."""
        if self.loop.is_closed():
            return
        try:
            self._sync(self._shutdown(), 10)
        except Exception:
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self.loop.close()

    # -- loop side ----------------------------------------------------------------------------
    async def _swap(self) -> tuple[list[tuple[int, int, int, int, list[int], int]], dict[int, str]]:
        records, self.records = self.records, []
        examples, self.error_examples = self.error_examples, {}
        return records, examples

    async def _open(self) -> None:
        import grpc.aio

        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(
                f"{self.cfg.host}:{self.cfg.port}",
                options=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)],
            )
            await self._channel.channel_ready()
        if self._call is None or self._call.done():
            method = self._channel.stream_stream(_STREAM_INFER)  # raw bytes both ways
            self._call = method()
            self._outq = asyncio.Queue()
            self._reader = self.loop.create_task(self._read(self._call))
            self._writer = self.loop.create_task(self._write(self._call, self._outq))

    async def _start(self, level: LoadLevel, t0_ns: int, share: float, worker: int, workers: int) -> None:
        self.records, self.error_examples = [], {}
        self._trace = None
        self.inflight.clear()
        self._pending.clear()
        self.closed_loop = level.mode == "concurrency"
        await self._open()
        seq = self.cfg.sequences
        slots = int(share) if self.closed_loop else (seq.num_sequences if seq else 0)
        # IDs go on from the previous level's: its last sequences may still be open on the server
        used = self._seq.ids_issued if self._seq is not None else 0
        self._seq = SequenceManager(seq, max(1, slots), seed=self.cfg.seed + worker, first_id=used) if seq else None
        self.active = True
        if self.closed_loop:
            for slot in range(int(share)):
                self._send(-1, slot)
            return
        if self.cfg.schedule_ns:
            self._trace = _Trace(self.cfg.sessions or (-1,) * len(self.cfg.schedule_ns))
            self._dues = iter(self.cfg.schedule_ns)
        else:
            self._dues = due_times(
                level, seed=self.cfg.seed, worker=worker, workers=workers, intervals_ns=self.cfg.intervals_ns
            )
        self._t0 = t0_ns
        first = next(self._dues, None)
        if first is not None:
            self._next_due = t0_ns + first
            self.loop.call_at(self._next_due / 1e9, self._tick)

    def _send(self, due: int, slot: int) -> None:
        rid = str(next(self._ids))
        if self._seq is not None:
            index, seq_id, start, end = self._seq.next_request(slot, len(self.cfg.payloads))
            self._seq.slot(slot).in_flight += 1
            suffix = request_suffix(rid, sequence_id=self._seq.wire_id(seq_id), start=start, end=end)
        else:
            index = next(self._payloads)
            suffix = request_suffix(rid)
        req = _Req(due, slot)
        self.inflight[rid] = req
        req.sent = perf_counter_ns()
        self._transmit(rid, self.cfg.payloads[index] + suffix)

    def _transmit(self, rid: str, data: bytes) -> None:
        # One writer drains a FIFO (a stream takes one write at a time): the order of sends
        # on the stream is the order of these calls, which keeps a sequence's steps in order.
        self._outq.put_nowait(data)

    async def _write(self, call: Any, queue: asyncio.Queue[bytes]) -> None:
        try:
            while True:
                await call.write(await queue.get())
        except asyncio.CancelledError:
            raise
        except Exception as err:  # the stream broke: the reader fails what is in flight
            self.error_examples.setdefault(STATUS_CONNECTION_CLOSED, str(err)[:300])

    async def _read(self, call: Any) -> None:
        try:
            async for raw in call:
                self._on_message(raw, perf_counter_ns())
            status = STATUS_CONNECTION_CLOSED  # the server ended the stream
            if self.inflight:
                self.error_examples.setdefault(status, "the server closed the stream")
        except asyncio.CancelledError:
            return
        except Exception as err:
            code = getattr(err, "code", None)
            status = STATUS_CONNECTION_CLOSED
            if callable(code):
                try:
                    status = GRPC_STATUS_BASE + int(code().value[0])
                except Exception:
                    pass
            self.error_examples.setdefault(status, str(err)[:300])
        self._fail_inflight(status)

    def _fail_inflight(self, status: int) -> None:
        now = perf_counter_ns()
        for rid, req in list(self.inflight.items()):
            self._finish(rid, req, now, status, resend=False)

    def _on_message(self, raw: bytes, now: int) -> None:
        """One ModelStreamInferResponse: a response of a request in flight, maybe its final one."""
        msg = self._parse(raw)
        resp = msg.infer_response
        req = self.inflight.get(resp.id)
        if msg.error_message:
            rid = resp.id
            if req is None and self.inflight:  # errors may come without the id
                rid = next(iter(self.inflight))
                req = self.inflight[rid]
            if req is not None:
                self.error_examples.setdefault(STATUS_STREAM_ERROR, msg.error_message[:300])
                self._finish(rid, req, now, STATUS_STREAM_ERROR)
            return
        if req is None:
            return
        if resp.outputs:
            req.responses.append(now)
            if self.cfg.token_output:
                for out in resp.outputs:
                    if out.name == self.cfg.token_output:
                        req.tokens += math.prod(out.shape)
        param = resp.parameters.get(_FINAL)
        if param is not None and param.bool_param:
            self._finish(resp.id, req, now, 0)

    def _finish(self, rid: str, req: _Req, done: int, status: int, resend: bool = True) -> None:
        del self.inflight[rid]
        self.records.append((req.due, req.sent, done, status, req.responses, req.tokens))
        if self._trace is not None:
            self._trace_done(req.slot)
            return
        if self._seq is not None:
            self._seq.slot(req.slot).in_flight -= 1
        if not (self.active and resend):
            return
        if self.closed_loop:
            self._send(-1, req.slot)
        elif self._pending and self._seq is not None:
            self._send(self._pending.popleft(), req.slot)

    # open loop
    def _tick(self) -> None:
        if not self.active or self._dues is None:
            return
        now = perf_counter_ns()
        due = self._next_due
        while due <= now:
            self._dispatch(due)
            offset = next(self._dues, None)
            if offset is None:  # a replayed trace has run out
                return
            due = self._t0 + offset
            if due > now:
                now = perf_counter_ns()
        self._next_due = due
        self.loop.call_at(due / 1e9, self._tick)

    def _dispatch(self, due: int) -> None:
        if len(self.inflight) + len(self._pending) >= self.cfg.max_outstanding:
            self.records.append((due, -1, perf_counter_ns(), STATUS_DROPPED, [], 0))
            if self._trace is not None:
                self._trace.next += 1
            return
        if self._trace is not None:
            self._trace_dispatch(due)
            return
        if self._seq is None:
            self._send(due, 0)
            return
        # Sequences take due requests round-robin; with --serial-sequences a sequence with a
        # request in flight is skipped, and when all are busy the request waits (sent late).
        n = len(self._seq._slots)
        for k in range(n):
            slot = (self._seq_rr + k) % n
            if not self.cfg.sequences or not self.cfg.sequences.serial or self._seq.slot(slot).in_flight == 0:
                self._seq_rr = slot + 1
                self._send(due, slot)
                return
        self._pending.append(due)

    # trace replay
    def _trace_dispatch(self, due: int) -> None:
        trace = self._trace
        assert trace is not None
        k = trace.next
        trace.next += 1
        session = trace.sessions[k]
        if session >= 0 and session in trace.busy:
            trace.waiting.setdefault(session, collections.deque()).append((k, due))
            return
        self._trace_send(k, due)

    def _trace_send(self, k: int, due: int) -> None:
        trace = self._trace
        assert trace is not None
        session = trace.sessions[k]
        rid = str(next(self._ids))
        if session >= 0 and self.cfg.sequences is not None:
            start = trace.turns_sent.get(session, 0) == 0
            end = trace.turns_sent.get(session, 0) + 1 == trace.turns[session]
            seq_id = self.cfg.sequences.id_start + session
            wire: int | str = str(seq_id) if self.cfg.sequences.string_ids else seq_id
            suffix = request_suffix(rid, sequence_id=wire, start=start, end=end)
        else:
            suffix = request_suffix(rid)
        if session >= 0:
            trace.busy.add(session)
            trace.turns_sent[session] = trace.turns_sent.get(session, 0) + 1
        req = _Req(due, k)
        self.inflight[rid] = req
        req.sent = perf_counter_ns()
        self._transmit(rid, self._trace_payload(k, suffix))

    def _trace_payload(self, k: int, suffix: bytes) -> bytes:
        return self.cfg.payloads[k] + suffix

    def _trace_done(self, k: int) -> None:
        trace = self._trace
        assert trace is not None
        session = trace.sessions[k]
        if session < 0:
            return
        trace.busy.discard(session)
        queue = trace.waiting.get(session)
        if queue and not trace.closed:  # waiting turns still go out while the level drains
            nxt, due = queue.popleft()
            self._trace_send(nxt, due)

    async def _stop(
        self, drain_timeout_s: float
    ) -> tuple[list[tuple[int, int, int, int, list[int], int]], dict[int, str]]:
        self.active = False
        deadline = perf_counter_ns() + int(drain_timeout_s * 1e9)
        while self._pending:
            self.records.append((self._pending.popleft(), -1, perf_counter_ns(), STATUS_DROPPED, [], 0))
        while (self.inflight or (self._trace and self._trace.waiting_count())) and perf_counter_ns() < deadline:
            await asyncio.sleep(0.002)
        if self._seq is not None and self._trace is None and not self.inflight:
            # Live sequences get one last request flagged end (perf_analyzer's
            # CompleteOngoingSequences, src/infer_context.cc): left open they would hold the
            # sequence batcher's slots until their idle timeout and stall the next level.
            for index, slot in enumerate(self._seq._slots):
                if slot.started and slot.remaining > 0:
                    slot.remaining = 1
                    self._send(-1, index)
            while self.inflight and perf_counter_ns() < deadline:
                await asyncio.sleep(0.002)
        if self._trace is not None:
            self._trace.closed = True
            for queue in self._trace.waiting.values():
                while queue:  # a session's turns never sent: its previous turn did not finish in time
                    self.records.append((queue.popleft()[1], -1, perf_counter_ns(), STATUS_UNFINISHED, [], 0))
        if self.inflight:
            now = perf_counter_ns()
            for rid, req in list(self.inflight.items()):
                self._finish(rid, req, now, STATUS_UNFINISHED, resend=False)
            self.error_examples.setdefault(STATUS_UNFINISHED, f"still in flight after {drain_timeout_s:g} s")
            # A request left running would answer into the next level: start a fresh stream.
            await self._close_call()
        return await self._swap()

    async def _close_call(self) -> None:
        if self._call is not None:
            self._call.cancel()
            self._call = None
        for task in (self._reader, self._writer):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._reader = self._writer = None

    async def _shutdown(self) -> None:
        self.active = False
        if self._call is not None:
            self._call.cancel()
        await self._close_call()
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

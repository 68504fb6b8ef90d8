"""What every streaming transport shares: which request goes next, and its one record.

A streaming transport is a `_transport.Transport`: the loop modes of `_loops` drive it
and the `_ledger.Ledger` keeps its records, so a streamed request is one ledger entry
that ends with its final response (or its failure); the arrival times of its responses
(and its output tokens) ride along via `Ledger.finish_streamed`.

On top of the plain contract this base class keeps:
  - sequences (stateful models): each request is the next step of a live sequence, whose
    correlation ID and start/end flags go with it. Closed loop: one sequence per
    concurrency slot, a slot's next step leaves when its previous one is recorded.
    Open loop: due requests go round-robin over `num_sequences` sequences; with serial
    sequences one whose step is in flight is skipped, and when all are busy the request
    waits (begun, so it counts toward max_outstanding) and leaves late with its due time.
  - trace replay: request k of the schedule sends payload k once; turns of one session
    go one at a time, in order (a waiting turn is begun, like a waiting sequence step).
  - the end of a level (`drain`): waiting sequence steps are dropped, live sequences get
    one last step flagged end (perf_analyzer's CompleteOngoingSequences,
    src/infer_context.cc: left open they hold the sequence batcher's slots until their
    idle timeout and stall the next level), trace turns never sent are unfinished.
Subclasses carry the bytes: `_request` builds one, `_transmit` sends it, `_close_stream`
drops the connections, and they call `_finish` once per request and `_stream_ended` when
a stream the server broke took requests with it.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter_ns

from perfkit.loadgen._ledger import Ledger
from perfkit.loadgen._sequences import SequenceManager, SequenceSpec
from perfkit.loadgen._stream_parts import _Req, _Trace
from perfkit.loadgen._transport import Transport
from perfkit.records import STATUS_DROPPED, STATUS_UNFINISHED

SeqFlags = tuple[int | str, bool, bool]  # (correlation ID as sent, start, end)


def _nothing() -> None:
    pass


@dataclass(frozen=True)
class StreamConfig:
    """Everything a streaming transport needs; picklable."""

    host: str
    port: int
    payloads: tuple[bytes, ...]  # serialized ModelInferRequest, without id
    intervals_ns: tuple[int, ...] = ()
    seed: int = 0
    max_outstanding: int = 1000
    sequences: SequenceSpec | None = None  # sequence (stateful) model: IDs and flags per request
    # "grpc": ModelStreamInfer on the hand-written HTTP/2 client; "grpc.aio": the same on
    # grpc.aio (slower, kept as a reference); "sse": HTTP generate_stream; "http": a
    # sequence model over plain HTTP infer calls; "openai": an OpenAI-compatible endpoint (`_openai`).
    transport: str = "grpc"
    # Trace replay: request k is due schedule_ns[k] after the start and sends payloads[k], once.
    # sessions[k] >= 0 groups requests into a session whose turns go one at a time, in order
    # (a sequence, with start/end flags, on a sequence model).
    schedule_ns: tuple[int, ...] = ()
    sessions: tuple[int, ...] = ()
    token_output: str = ""  # count tokens as this output tensor's elements (gRPC only)
    http_path: str = ""  # transport "http": the infer path the sequence requests post to
    # perf_analyzer's -H: on the gRPC stream as metadata (its StartStream passes them,
    # src/client_backend/triton/triton_client_backend.cc), on HTTP requests as headers
    headers: tuple[tuple[str, str], ...] = ()
    compression: str = ""  # perf_analyzer's --grpc-compression-algorithm on the gRPC stream's messages
    # perf_analyzer's --periodic-concurrency-range with --request-period: the run counts each
    # request's responses as they come (`_loops.PeriodicLoop`), on the Python transports
    periodic: bool = False
    # transport "openai": each payload's input tokens under the tokenizer (what its record says was sent)
    input_lengths: tuple[int, ...] = ()


class StreamTransport(Transport):
    """Request choice (plain, sequence step, trace turn) and record keeping for streamed requests."""

    def __init__(self, loop: asyncio.AbstractEventLoop, ledger: Ledger, cfg: StreamConfig) -> None:
        super().__init__(loop, ledger, cfg.payloads)
        self.cfg = cfg
        self.inflight: dict[str, _Req] = {}
        self._ids = itertools.count()
        self._indices = itertools.cycle(range(len(cfg.payloads)))
        self._seq: SequenceManager | None = None
        self._free: collections.deque[int] = collections.deque()  # closed loop: sequences with no step in flight
        self._rr = 0
        self._waiting: collections.deque[int] = collections.deque()  # open loop: due steps no sequence could take
        self._trace: _Trace | None = None
        self._closed_loop = True
        self.sending = False
        # perf_analyzer's --request-period (see _loops.PeriodicLoop): on_period runs on the loop
        # thread each time a request's `period`-th response arrives; short_finals counts
        # requests that ended with fewer responses than that
        self.period = 0
        self.on_period: Callable[[], None] = _nothing
        self.short_finals = 0

    # -- the Transport interface -----------------------------------------------------------------
    async def prepare(self, closed_loop: bool, share: int, rate_rps: float) -> None:
        self.inflight.clear()
        self._waiting.clear()
        self._closed_loop = closed_loop
        seq = self.cfg.sequences
        self._trace = None
        if self.cfg.schedule_ns and not closed_loop:
            self._trace = _Trace(self.cfg.sessions or (-1,) * len(self.cfg.schedule_ns))
        slots = share if closed_loop else (seq.num_sequences if seq else 0)
        # IDs go on from the previous level's: its last sequences may still be open on the server
        used = self._seq.ids_issued if self._seq is not None else 0
        self._seq = SequenceManager(seq, max(1, slots), seed=self.cfg.seed, first_id=used) if seq else None
        self._free = collections.deque(range(max(1, slots)))
        self._rr = 0
        self.sending = True
        await self._open()

    def submit(self, due_ns: int) -> None:
        if self._trace is not None:
            self._trace_dispatch(due_ns)
        elif self._seq is None:
            self._send(due_ns, 0)
        elif self._closed_loop:
            self._send(due_ns, self._free.popleft())
        else:
            self._open_loop_step(due_ns)

    def dropped(self, due_ns: int) -> None:
        if self._trace is not None:
            self._trace.next += 1  # that entry of the trace is spent

    async def drain(self, deadline: float) -> None:
        self.sending = False
        now = perf_counter_ns()
        while self._waiting:
            msg = "no sequence was free to take it before the level ended"
            self.ledger.finish(self._waiting.popleft(), -1, now, STATUS_DROPPED, msg)
        await self._wait(deadline)
        if self._seq is not None and self._trace is None and self.ledger.in_flight == 0:
            for index, slot in enumerate(self._seq._slots):
                if slot.started and slot.remaining > 0:
                    slot.remaining = 1
                    self.ledger.begin()
                    self._send(-1, index)
            await self._wait(deadline)
        if self._trace is not None:
            self._trace.closed = True
            now = perf_counter_ns()
            for queue in self._trace.waiting.values():
                while queue:  # a session's turn never sent: its previous turn did not finish in time
                    msg = "its session's previous turn did not finish before the level ended"
                    self.ledger.finish(queue.popleft()[1], -1, now, STATUS_UNFINISHED, msg)

    async def abort_in_flight(self, message: str) -> None:
        now = perf_counter_ns()
        for rid, req in list(self.inflight.items()):
            self._finish(rid, req, now, STATUS_UNFINISHED, message)
        # A request left running would answer into the next level: start a fresh stream.
        await self._close_stream()

    async def close(self) -> None:
        self.sending = False
        await self._close_stream()
        await self.cancel_tasks()

    def responded(self, req: _Req, now: int, has_outputs: bool) -> None:
        """One response of `req` arrived (on the loop or a reader thread): its time, if it carried
        outputs; with a request period, every response counts, as perf_analyzer counts them
        (the flag-only final one too: num_responses_++ for each, src/infer_context.cc:322)."""
        if has_outputs:
            req.responses.append(now)
        if self.period:
            req.counted += 1
            if req.counted == self.period:
                self.loop.call_soon_threadsafe(self.on_period)

    # -- for subclasses ----------------------------------------------------------------------------
    async def _open(self) -> None:
        """Warm the stream or connections before a level; raises ServerError if the server is unreachable."""

    def _request(self, rid: str, index: int, seq: SeqFlags | None) -> bytes:
        raise NotImplementedError

    def _transmit(self, rid: str, data: bytes) -> None:
        raise NotImplementedError

    async def _close_stream(self) -> None:
        """Drop the stream or connections (perfkit's own close: no reconnect is owed)."""

    def _finish(self, rid: str, req: _Req, done_ns: int, status: int, message: str = "") -> None:
        """The one record of request rid, then what its end lets go: a waiting step, the next turn."""
        if self.inflight.pop(rid, None) is None:
            return
        if self.period and status == 0 and req.counted < self.period:
            self.short_finals += 1
        self.ledger.finish_streamed(
            req.due, req.sent, done_ns, status, message, req.responses, req.tokens, (req.sent_tokens, req.input_tokens)
        )
        if self._trace is not None:
            self._trace_done(req.slot)
        elif self._seq is not None:
            self._seq.slot(req.slot).in_flight -= 1
            if self._closed_loop:
                self._free.append(req.slot)
            elif self._waiting and self.sending:
                self._send(self._waiting.popleft(), req.slot)
        self.on_done(status)

    def _stream_ended(self, status: int, message: str, replaced: object = None) -> None:
        """The server (or the network) ended a stream: what it carried fails; the next request reconnects.

        `replaced`: the stream (a request's `call`) that a newer one had already replaced
        when its end was seen; only what was written to it fails, and no reconnect is owed.
        """
        if replaced is None:
            self.ledger.connection_lost()
        now = perf_counter_ns()
        for rid, req in list(self.inflight.items()):
            if req.sent >= 0 and (replaced is None or req.call is replaced):
                self._finish(rid, req, now, status, message)

    # -- request choice ----------------------------------------------------------------------------
    async def _wait(self, deadline: float) -> None:
        while self.ledger.in_flight > 0 and self.loop.time() < deadline:
            await asyncio.sleep(0.002)

    def _send(self, due: int, slot: int) -> None:
        rid = str(next(self._ids))
        seq: SeqFlags | None = None
        if self._seq is not None:
            index, seq_id, start, end = self._seq.next_request(slot, len(self.cfg.payloads))
            self._seq.slot(slot).in_flight += 1
            seq = (self._seq.wire_id(seq_id), start, end)
        else:
            index = next(self._indices)
        self._launch(rid, _Req(due, slot), self._request(rid, index, seq))

    def _launch(self, rid: str, req: _Req, data: bytes) -> None:
        self.inflight[rid] = req
        req.sent = perf_counter_ns()
        self._transmit(rid, data)

    def _open_loop_step(self, due: int) -> None:
        # Due steps go round-robin; with serial sequences one with a step in flight is
        # skipped, and when all are busy the step waits (sent late, keeping its due time).
        seq = self._seq
        assert seq is not None
        n = len(seq._slots)
        serial = self.cfg.sequences is not None and self.cfg.sequences.serial
        for k in range(n):
            slot = (self._rr + k) % n
            if not serial or seq.slot(slot).in_flight == 0:
                self._rr = slot + 1
                self._send(due, slot)
                return
        self._waiting.append(due)

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
        seq: SeqFlags | None = None
        if session >= 0 and self.cfg.sequences is not None:
            sent = trace.turns_sent.get(session, 0)
            seq_id = self.cfg.sequences.id_start + session
            seq = (
                str(seq_id) if self.cfg.sequences.string_ids else seq_id,
                sent == 0,
                sent + 1 == trace.turns[session],
            )
        if session >= 0:
            trace.busy.add(session)
            trace.turns_sent[session] = trace.turns_sent.get(session, 0) + 1
        self._launch(rid, _Req(due, k), self._request(rid, k, seq))

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

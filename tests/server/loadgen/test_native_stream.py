"""The compiled sender's streamed gRPC requests (perfkit/loadgen/_native_h2_stream.c: decoupled models
on one ModelStreamInfer stream): chosen where it can carry a run, the same request bytes and records
as the Python stream transport, and the stream's edge cases.

Against the real server: every token of the streamer fixture timed in each request's record, closed
and open loop. Against a scripted HTTP/2 peer, for what Triton does not do on demand: responses cut
into DATA frames at every byte boundary, errors with and without a request id, a message nobody can
read, a stream the server ends (trailers, RST_STREAM, GOAWAY), and a level's end with requests still
in flight (they end unfinished, the stream is replaced). Faults through a proxy are in
tests/server/loadgen/test_stream_faults.py, which runs its cases on this sender too ("native-grpc").
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import hpack
import numpy as np
import pytest

from perfkit.loadgen import LoadGenerator, ModelIO, SequenceSpec, StreamConfig, Tensor, grpc_payload, to_wire
from perfkit.loadgen._native_engine import NativeEngine
from perfkit.loadgen._stream_grpc import grpc_stream_request
from perfkit.recorder import concat
from perfkit.records import (
    STATUS_CONNECTION_CLOSED,
    STATUS_DROPPED,
    STATUS_PROTOCOL,
    STATUS_STREAM_ERROR,
    STATUS_UNFINISHED,
    LoadLevel,
    Samples,
)
from perfkit.schedule import due_times
from tests.conftest import wait_until
from tests.server.loadgen.test_native_sender import _frame, _need, _ScriptedPeer, _until, engine_choice, h2_frames

METADATA = (("X-Perfkit-Test", "abc123"),)


def test_make_engine_picks_the_compiled_sender_for_plain_grpc_streams(monkeypatch):
    _need("native")
    others = [
        StreamConfig("127.0.0.1", 1, (b"x",), transport="grpc.aio"),
        StreamConfig("127.0.0.1", 1, (b"x",), sequences=SequenceSpec(length=2)),
        StreamConfig("127.0.0.1", 1, (b"x",), schedule_ns=(0,)),
        StreamConfig("127.0.0.1", 1, (b"x",), token_output="text_output"),
        StreamConfig("127.0.0.1", 1, (b"x",), compression="gzip"),
        StreamConfig("127.0.0.1", 1, (b"x",), periodic=True),
    ]
    engine_choice(StreamConfig("127.0.0.1", 1, (b"x",), headers=METADATA), others, monkeypatch)


def _streamer_payload(server, tokens: int) -> bytes:
    io = ModelIO.from_server(server.model_metadata("streamer", ""), server.model_config("streamer"))
    tensors = [
        Tensor("text_input", "BYTES", (1,), to_wire(np.array([b"hi"], dtype=np.object_), "BYTES")),
        Tensor("max_tokens", "INT32", (1,), to_wire(np.array([tokens], dtype=np.int32), "INT32")),
        Tensor("stream", "BOOL", (1,), to_wire(np.array([True]), "BOOL")),
    ]
    return grpc_payload(io, tensors)


@pytest.mark.parametrize("level", [LoadLevel("concurrency", 3), LoadLevel("request_rate", 40, "constant")])
def test_every_token_of_the_streamer_is_timed_in_its_record(triton, level):
    _need("native")
    cfg = StreamConfig(triton.endpoints.host, int(triton.endpoints.grpc_port), (_streamer_payload(triton, 5),))
    parts: list[Samples] = []
    with LoadGenerator(cfg) as gen:
        assert isinstance(gen._engines[0], NativeEngine)
        t0 = gen.start(level)
        _until(gen, parts, lambda s: len(s) >= 12)
        parts.append(gen.stop(10.0))
    s = concat(parts)
    assert (s.status == 0).all(), s.error_examples
    for i in range(len(s)):  # five tokens each, in order, after the send, the final response last
        times = s.response_ns[i]
        assert len(times) == 5 and (np.diff(times) >= 0).all()
        assert s.sent_ns[i] < times[0] and times[-1] <= s.done_ns[i]
    if level.mode == "request_rate":  # every due time of the schedule up to the last sent, once
        dues = due_times(level, seed=0)
        assert sorted(s.due_ns.tolist()) == [t0 + next(dues) for _ in range(len(s))]
    else:
        assert (s.due_ns == -1).all()


def _response(rid: str | None, outputs: bool, final: bool | None, error: str = "") -> bytes:
    from tritonclient.grpc import service_pb2

    msg = service_pb2.ModelStreamInferResponse(error_message=error)
    if rid is not None:
        msg.infer_response.id = rid
    if outputs:
        msg.infer_response.outputs.add(name="text_output", datatype="BYTES", shape=[1])
    if final is not None:
        msg.infer_response.parameters["triton_final_response"].bool_param = final
    return msg.SerializeToString()


def _message(raw: bytes, compressed: bool = False) -> bytes:
    return bytes((int(compressed),)) + len(raw).to_bytes(4, "big") + raw


class _StreamPeer(_ScriptedPeer):
    """An HTTP/2 peer holding ModelStreamInfer streams and answering each request by its id k:
    k % 6 in (0, 1): three tokens, then the empty final response; 2: an error naming it; 3: an
    error naming no request; 4: one final response carrying the outputs; 5: bytes that are no
    ModelStreamInferResponse. Every answer goes out as DATA frames of 7 bytes (messages cut
    anywhere). `end`: every request answered with three tokens, but after its 3rd request a
    connection's stream ends ("trailers", "rst" or "goaway") with that request unanswered;
    `silent`: nothing is answered. It records each request's id and bytes, the header blocks, and
    the HTTP/2 connections opened and closed."""

    def __init__(self, payload: bytes, end: str = "", silent: bool = False) -> None:
        self.payload, self.end, self.silent = payload, end, silent
        self.requests: list[tuple[str, bytes]] = []
        self.blocks: list[bytes] = []
        self.opened = self.closed = 0
        self._lock = threading.Lock()
        super().__init__()

    def _answer(self, conn: socket.socket) -> None:
        buf, count, opened = b"", 0, False
        with conn, contextlib.suppress(OSError):
            # no preface, no frames: perfkit's check that the server is reachable is no connection
            for ftype, _, sid, body in h2_frames(conn):
                length = len(body)
                if not opened:
                    opened = True
                    with self._lock:
                        self.opened += 1
                if ftype == 1:
                    with self._lock:
                        self.blocks.append(body)
                elif ftype == 0:
                    update = length.to_bytes(4, "big")
                    conn.sendall(_frame(8, 0, 0, update) + _frame(8, 0, sid, update))
                    buf += body
                    while len(buf) >= 5 and len(buf) >= 5 + int.from_bytes(buf[1:5], "big"):
                        end = 5 + int.from_bytes(buf[1:5], "big")
                        request, buf = buf[5:end], buf[end:]
                        rid = request[len(self.payload) + 2 : len(self.payload) + 2 + request[len(self.payload) + 1]]
                        with self._lock:
                            self.requests.append((rid.decode(), request))
                        count += 1
                        if self.end and count == 3:
                            conn.sendall(self._ending(sid))
                            continue
                        if not self.silent:
                            reply = self._reply(rid.decode())
                            conn.sendall(b"".join(_frame(0, 0, sid, reply[i : i + 7]) for i in range(0, len(reply), 7)))
        if opened:
            with self._lock:
                self.closed += 1

    def _ending(self, sid: int) -> bytes:
        if self.end == "rst":
            return _frame(3, 0, sid, (8).to_bytes(4, "big"))
        if self.end == "goaway":
            return _frame(7, 0, 0, sid.to_bytes(4, "big") + (0).to_bytes(4, "big"))
        block = hpack.Encoder().encode([(":status", "200"), ("content-type", "application/grpc"), ("grpc-status", "0")])
        return _frame(1, 0x5, sid, block)

    def _reply(self, rid: str) -> bytes:
        k = int(rid) % 6
        if k in (0, 1) or self.end:
            tokens = [_message(_response(rid, True, False)) for _ in range(3)]
            return b"".join(tokens) + _message(_response(rid, False, True))
        if k == 2:
            return _message(_response(rid, False, None, error=f"failed {rid}"))
        if k == 3:
            return _message(_response(None, False, None, error="an error naming no request"))
        if k == 4:
            return _message(_response(rid, True, True))
        return _message(b"\xff\xff\xff")


@contextlib.contextmanager
def _peer(**kw) -> Iterator[_StreamPeer]:
    peer = _StreamPeer(b"\x0a\x08streamer" + b"z" * 300, **kw)  # a ModelInferRequest's model_name, padded
    try:
        yield peer
    finally:
        peer.close()


def _run(peer: _StreamPeer, level: LoadLevel, until, drain_s: float = 5.0, **kw) -> Samples:
    cfg = StreamConfig("127.0.0.1", peer.port, (peer.payload,), headers=METADATA, **kw)
    parts: list[Samples] = []
    with LoadGenerator(cfg) as gen:
        assert isinstance(gen._engines[0], NativeEngine)
        gen.start(level)
        _until(gen, parts, until)
        parts.append(gen.stop(drain_s))
    return concat(parts)


def test_responses_across_frames_errors_and_unreadable_messages():
    _need("native")
    with _peer() as peer:
        s = _run(peer, LoadLevel("concurrency", 1), lambda s: len(s) >= 24)
        requests = list(peer.requests)
        blocks = list(peer.blocks)
    # the request bytes are exactly the Python transport's: the payload, its id (a counter), the flag
    assert [rid for rid, _ in requests] == [str(i) for i in range(len(requests))]
    assert all(raw == grpc_stream_request(peer.payload, rid, None) for rid, raw in requests)
    fields = hpack.Decoder().decode(blocks[0])
    assert (":path", "/inference.GRPCInferenceService/ModelStreamInfer") in fields
    assert ("x-perfkit-test", "abc123") in fields
    # one request at a time: record i is request i, ended as the script answered it
    expected = {0: (0, 3), 1: (0, 3), 2: (STATUS_STREAM_ERROR, 0), 3: (STATUS_STREAM_ERROR, 0), 4: (0, 1)}
    expected[5] = (STATUS_PROTOCOL, 0)
    got = [(int(s.status[i]), len(s.response_ns[i])) for i in range(len(s))]
    assert got == [expected[i % 6] for i in range(len(s))]
    assert s.error_examples[STATUS_STREAM_ERROR] == "failed 2"
    assert s.error_examples[STATUS_PROTOCOL].startswith("a ModelStreamInferResponse perfkit cannot read")
    for i in np.flatnonzero(s.status == 0):
        assert s.sent_ns[i] < s.response_ns[i][0] and s.response_ns[i][-1] <= s.done_ns[i]
    assert s.reconnects == 0


@pytest.mark.parametrize(
    "end, message",
    [
        ("trailers", "stream ended"),
        ("rst", "stream reset by the server (HTTP/2 error 8)"),
        ("goaway", "server sent GOAWAY"),
    ],
)
def test_a_stream_the_server_ends_fails_what_it_carried_and_is_replaced(end, message):
    _need("native")
    with _peer(end=end) as peer:
        s = _run(peer, LoadLevel("concurrency", 1), lambda s: int((s.status == STATUS_CONNECTION_CLOSED).sum()) >= 3)
        opened = peer.opened
    assert set(np.unique(s.status).tolist()) == {0, STATUS_CONNECTION_CLOSED}, s.error_examples
    assert s.error_examples[STATUS_CONNECTION_CLOSED] == message
    assert s.reconnects >= 2 and opened >= 3


def test_open_loop_drops_past_max_outstanding_and_the_level_end_replaces_the_stream():
    _need("native")
    level = LoadLevel("request_rate", 200, "constant")
    with _peer(silent=True) as peer:
        s = _run(peer, level, lambda s: int((s.status == STATUS_DROPPED).sum()) >= 10, drain_s=0.2, max_outstanding=3)
        wait_until(lambda: peer.closed == 1, "perfkit closed the stream's connection at the level's end", 10)
        assert peer.opened == 1
    # every due time of the schedule has one record: three unfinished, the rest dropped
    t0 = int(s.due_ns.min())
    dues = due_times(level, seed=0)
    assert sorted(s.due_ns.tolist()) == [t0 + next(dues) for _ in range(len(s))]
    assert int((s.status == STATUS_UNFINISHED).sum()) == 3
    assert set(np.unique(s.status).tolist()) == {STATUS_DROPPED, STATUS_UNFINISHED}
    assert s.reconnects == 0  # perfkit's own close: no reconnect


def test_each_level_that_ends_with_requests_in_flight_leaves_its_stream_behind():
    _need("native")
    # A silent stream: each level ends with its requests unfinished and its stream closed (a
    # response still coming cannot answer into the next level); the next level opens a fresh one.
    with _peer(silent=True) as peer:
        cfg = StreamConfig("127.0.0.1", peer.port, (peer.payload,))
        with LoadGenerator(cfg) as gen:
            for _ in range(2):
                gen.start(LoadLevel("request_rate", 50, "constant"))
                wait_until(lambda: len(peer.requests) >= 2, "requests on the stream", 10)
                s = gen.stop(0.1)
                assert len(s) >= 2 and (s.status == STATUS_UNFINISHED).all()
                peer.requests.clear()
        wait_until(lambda: peer.closed == 2, "both streams closed", 10)
        assert peer.opened == 2

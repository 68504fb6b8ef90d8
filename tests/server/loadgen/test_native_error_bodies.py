"""Answers other than 200 on the compiled sender: their bodies are read up to a bound, never allocated
as announced.

HTTP/1.1: an error answer whose Content-Length is at most 1 MiB is read whole (its text kept as the
error's example); one announcing more (a terabyte, as a broken proxy may) ends its request with the
answer's status and a message saying so, unread, and the connection closes; it used to end as
"closed: Cannot allocate memory". HTTP/2 stream: a ModelStreamInfer answer with a :status other than
200 ends the stream at its head, its body never read as gRPC messages.
"""

from __future__ import annotations

import contextlib
import socket

import hpack
import numpy as np

from perfkit.records import STATUS_CONNECTION_CLOSED, LoadLevel
from tests.server.loadgen.test_native_sender import _frame, _need, _scripted_run, _ScriptedPeer
from tests.server.loadgen.test_native_stream import _peer, _run, _StreamPeer

HUGE = 1 << 40


class _ErrorBodyServer(_ScriptedPeer):
    """Answers requests in turn: a 503 announcing HUGE bytes of body (a little of it sent, the connection
    left open), a 500 with a small body, and a 507 announcing 1 MiB + 1 bytes."""

    def __init__(self) -> None:
        self.count = 0
        super().__init__()

    def _answer(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):  # perfkit resets the connections it gives up
            while conn.recv(65536):
                self.count += 1
                if self.count % 3 == 1:
                    conn.sendall(b"HTTP/1.1 503 Busy\r\nContent-Length: %d\r\n\r\n<html>busy" % HUGE)
                elif self.count % 3 == 2:
                    conn.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 11\r\n\r\nsmall error")
                else:
                    conn.sendall(b"HTTP/1.1 507 Full\r\nContent-Length: %d\r\n\r\nfull" % ((1 << 20) + 1))


def test_an_error_answer_announcing_a_huge_body_ends_its_request_unread():
    _need("native")
    s = _scripted_run(_ErrorBodyServer(), "native", 1, lambda s: len(s) >= 9)
    assert set(np.unique(s.status).tolist()) == {500, 503, 507}, s.error_examples
    assert s.error_examples[503] == (
        f"HTTP 503 answer announcing a {HUGE}-byte body, past the 1048576 bytes perfkit reads of an answer other"
        " than 200: not read, connection closed"
    )
    assert "announcing a 1048577-byte body" in s.error_examples[507]
    assert s.error_examples[500].endswith("small error")  # a small one is read whole, on its connection
    assert STATUS_CONNECTION_CLOSED not in s.error_examples
    assert s.reconnects == 0  # perfkit closed those connections itself


class _Http503StreamPeer(_StreamPeer):
    """After a connection's 3rd request, HEADERS with :status 503 (the stream left open) and a body that
    reads as a gRPC message of 1 GiB - 1 bytes."""

    def _ending(self, sid: int) -> bytes:
        block = hpack.Encoder().encode([(":status", "503"), ("content-type", "text/html")])
        return _frame(1, 0x4, sid, block) + _frame(0, 0, sid, b"\x00\x3f\xff\xff\xff<html>busy")


def test_a_stream_answered_other_than_200_ends_at_its_head():
    _need("native")
    with _peer(end="http503") as plain:
        peer = _Http503StreamPeer(plain.payload, end="http503")
    try:
        s = _run(peer, LoadLevel("concurrency", 1), lambda s: int((s.status == 503).sum()) >= 3)
    finally:
        peer.close()
    assert set(np.unique(s.status).tolist()) == {0, 503}, s.error_examples
    assert s.error_examples[503] == "stream ended"

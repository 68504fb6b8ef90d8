"""Unary gRPC calls on one HTTP/2 connection read by a thread of its own (plain TCP).

The frames are `_h2.H2Calls`'; the socket is a `_reader_socket.ReaderSocket`. The reader
thread cuts frames, decodes the response headers (the HPACK decoder and its cache are
its own) and timestamps each call's end; the ends found in one read go to the loop thread
as one batch, in arrival order, and everything else that changes the connection's state
(SETTINGS, PING, WINDOW_UPDATE, RST_STREAM, GOAWAY, an HPACK error, the connection's end)
follows them in order. The loop thread keeps the calls in flight, the windows and the
ledger. TLS connections stay on the asyncio Protocol (`_h2.H2Conn`): an SSL object is not
read and written from two threads at once.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

from perfkit.loadgen._h2 import _ACK, _SETTINGS, H2Calls
from perfkit.loadgen._reader_socket import ReaderSocket
from perfkit.loadgen._transport import LARGE_SNDBUF_BYTES

if TYPE_CHECKING:
    from perfkit.loadgen._h2 import H2Transport


class H2ThreadConn(ReaderSocket, H2Calls):
    """H2Calls over a socket read on its own thread."""

    def __init__(self, owner: H2Transport) -> None:
        ReaderSocket.__init__(self, owner.loop)
        H2Calls.__init__(self, owner)
        self._ended: list[tuple[int, dict[bytes, bytes], int]] = []  # the reader's, until handed over

    def start(self, sock: socket.socket) -> None:
        """Take a connected socket: start reading, send the preface."""
        largest = self.owner.largest_request_bytes
        if largest > 65536:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, min(LARGE_SNDBUF_BYTES, 2 * largest))
        self._start_reading(sock, "perfkit-h2-reader")
        self._out(self.preface())

    def close(self, abort: bool = False) -> None:
        self.ours = True
        self._shut()  # the reader wakes, and the connection's end comes back through _on_lost

    def _on_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.settled.done():
            self.settled.set_result(None)
        # Next turn of the loop: a failed write reaches here from inside send(), whose caller
        # must not see the records of what it is sending now; what is owed is recorded then.
        self._loop.call_soon(self.owner.lost, self, exc)

    # -- the reader thread --------------------------------------------------------------------
    def _frames(self, data: bytes, now: int) -> None:
        if self._bad:
            return
        self._cut(data, now)
        self._hand_ended()

    def _hand_ended(self) -> None:
        if self._ended:
            ended, self._ended = self._ended, []
            self._hand(self._finish_all, ended)

    def _stream_ended(self, sid: int, headers: dict[bytes, bytes], now: int) -> None:
        self._ended.append((sid, headers, now))

    def _control(self, ftype: int, flags: int, sid: int, payload: bytes) -> None:
        if ftype == _SETTINGS and not flags & _ACK:  # the decoder is this thread's
            for i in range(0, len(payload) - 5, 6):
                if payload[i : i + 2] == b"\x00\x01":
                    H2Calls._table_size(self, int.from_bytes(payload[i + 2 : i + 6], "big"))
        self._hand_ended()  # the calls that ended before this frame end before it acts
        self._hand(self._on_control, ftype, flags, sid, payload)

    def _refill(self, received: int) -> None:
        self._hand_ended()
        self._hand(self._write, self._window_update(received))

    def _hpack_failed(self, message: str) -> None:
        self._hand_ended()
        self._hand(self._fail, message)

    # -- the loop thread ----------------------------------------------------------------------
    def _table_size(self, value: int) -> None:
        pass  # applied on the reader thread (see _control)

    def _finish_all(self, ended: list[tuple[int, dict[bytes, bytes], int]]) -> None:
        for sid, headers, done in ended:
            self._finish(sid, headers, done)

    def _write(self, data: bytes) -> None:
        self._out(data)

    def _write_parts(self, parts: list[bytes | memoryview]) -> None:
        self._out_parts(parts)

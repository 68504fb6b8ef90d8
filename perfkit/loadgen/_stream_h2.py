"""ModelStreamInfer over the hand-written HTTP/2 client: one long-lived bidirectional stream.

grpc.aio costs ~200-400 us of client CPU per streamed response here (each message
crosses grpc's completion-queue thread and wakes the event loop); this protocol
writes one DATA frame per request on stream 1 and cuts gRPC messages out of the
incoming DATA frames itself. Flow control: huge receive windows are advertised (and
refilled); sends respect the server's connection and stream windows, queuing beyond.

Reading runs on a thread of its own, blocked in recv() on the socket: waking an event
loop costs ~130-200 us of CPU on a busy VM where a blocked thread's wakeup costs ~50
(benchmarks/streaming_vs_perf_analyzer.py), and a token stream wakes the client once
per response. That thread timestamps and files every non-final response itself; what
changes state (a final response, an error, HEADERS, control frames, the end of the
connection) goes to the loop thread in arrival order (call_soon_threadsafe), so the
ledger, the HPACK decoder and the flow-control windows stay the loop thread's alone.
"""

from __future__ import annotations

import asyncio
import collections
import socket
import struct
import threading
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any

import hpack

from perfkit.errors import ServerError
from perfkit.loadgen._h2 import PREFACE, grpc_message, header_block, headers_fragment
from perfkit.loadgen._ledger import Ledger
from perfkit.loadgen._stream_grpc import STREAM_INFER, grpc_stream_request, on_stream_message
from perfkit.loadgen._stream_parts import _Req
from perfkit.loadgen._stream_transport import SeqFlags, StreamConfig, StreamTransport
from perfkit.records import GRPC_STATUS_BASE, STATUS_CONNECTION_CLOSED, STATUS_CONNECTION_REFUSED, STATUS_PROTOCOL

_DATA, _HEADERS, _RST, _SETTINGS, _PING, _GOAWAY, _WINDOW, _CONT = 0, 1, 3, 4, 6, 7, 8, 9
_END_STREAM, _ACK, _END_HEADERS, _PADDED, _PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
_BIG_WINDOW = 2**31 - 1
_SID = 1  # the one stream


def _frame(ftype: int, flags: int, sid: int, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes((ftype, flags)) + struct.pack(">I", sid) + payload


class H2Stream:
    """One HTTP/2 connection (a socket of its own) with one gRPC bidirectional stream.

    The socket stays blocking: the reader thread sits in recv() (one syscall per wakeup);
    the loop thread writes with MSG_DONTWAIT and hands what the kernel did not take to
    the loop's writer callback. Closing is shutdown() (which wakes the reader) from the
    loop thread; the socket is closed there once the reader has left recv().
    """

    def __init__(
        self,
        authority: str,
        loop: asyncio.AbstractEventLoop,
        on_message: Callable[[bytes, int], None],
        on_end: Callable[[int, str], None],
        *,
        metadata: tuple[tuple[str, str], ...] = (),
        compression: str = "",
    ) -> None:
        self._block = header_block(authority, STREAM_INFER, compression, metadata=metadata)
        self._compression = compression
        self._loop = loop
        self._sock: socket.socket | None = None
        self._wbuf = bytearray()  # bytes the kernel did not take yet (the loop's writer drains them)
        self.on_message = on_message
        self.on_end = on_end
        self.closed = False
        self._buf = bytearray()
        self._msg = bytearray()
        self._decoder = hpack.Decoder()
        self._conn_window = 65535
        self._stream_window = 65535
        self._peer_initial = 65535
        self._max_frame = 16384
        self._received = 0
        self._blocked: collections.deque[bytes] = collections.deque()
        self._cont = bytearray()
        self._cont_end = False

    def start(self, sock: socket.socket) -> None:
        """Take a connected socket: send the preface, settings and the stream's HEADERS, start reading."""
        sock.setblocking(True)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
        settings = struct.pack(">HI", 0x2, 0) + struct.pack(">HI", 0x4, _BIG_WINDOW)
        head = struct.pack(">I", len(self._block))[1:] + bytes((_HEADERS, _END_HEADERS)) + struct.pack(">I", _SID)
        self._out(
            PREFACE
            + _frame(_SETTINGS, 0, 0, settings)
            + _frame(_WINDOW, 0, 0, struct.pack(">I", _BIG_WINDOW - 65535))
            + head
            + self._block
        )
        threading.Thread(target=self._read_loop, args=(sock,), name="perfkit-stream-reader", daemon=True).start()

    def _read_loop(self, sock: socket.socket) -> None:
        err: OSError | None = None
        while not self.closed:
            try:
                data = sock.recv(1 << 18)
            except InterruptedError:
                continue
            except OSError as e:
                err = e
                break
            if not data:
                break
            self._frames(data, perf_counter_ns())
        # The loop thread closes the socket: every write happens there, so none can meet a
        # descriptor number the system has handed to another socket meanwhile.
        if not self._hand(self._release, sock, err):
            sock.close()

    def _release(self, sock: socket.socket, err: OSError | None) -> None:
        self._lost(err)
        sock.close()

    def _hand(self, fn: Callable[..., None], *args: Any) -> bool:
        """Run fn(*args) on the loop thread, after everything handed before it; False if the loop is gone."""
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed: nobody is left to tell
            return False
        return True

    def _out(self, data: bytes) -> None:
        """Write from the loop thread without blocking it; the rest waits for the loop's writer."""
        sock = self._sock
        if sock is None or self.closed:
            return
        if self._wbuf:
            self._wbuf += data
            return
        try:
            sent = sock.send(data, socket.MSG_DONTWAIT)
        except BlockingIOError:
            sent = 0
        except OSError as err:
            self._lost(err)
            return
        if sent < len(data):
            self._wbuf += data[sent:]
            self._loop.add_writer(sock.fileno(), self._flush)

    def _flush(self) -> None:
        sock = self._sock
        if sock is None or self.closed:
            return
        try:
            sent = sock.send(self._wbuf, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return
        except OSError as err:
            self._lost(err)
            return
        del self._wbuf[:sent]
        if not self._wbuf:
            self._loop.remove_writer(sock.fileno())

    def _lost(self, exc: Exception | None) -> None:
        """The connection died under us (reset, EOF, a failed write): tell the owner once, then shut it."""
        if not self.closed:
            self.on_end(STATUS_CONNECTION_CLOSED, str(exc or "server closed the HTTP/2 connection"))
        self._shut()

    def _shut(self) -> None:
        """Closed for good: stop writing, and shut the socket down, which wakes the reader to close it."""
        self.closed = True
        sock, self._sock = self._sock, None
        if sock is None:
            return
        if self._wbuf:
            self._wbuf.clear()
            self._loop.remove_writer(sock.fileno())
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # -- sending ----------------------------------------------------------------------------
    def send(self, serialized: bytes) -> None:
        """Send one request (a serialized ModelInferRequest) as a gRPC message on the stream."""
        message = grpc_message(serialized, self._compression)  # compressed per request: each has its id
        if self._blocked or len(message) > min(self._conn_window, self._stream_window):
            self._blocked.append(message)
            return
        self._write(message)

    def _write(self, message: bytes) -> None:
        self._conn_window -= len(message)
        self._stream_window -= len(message)
        mf = self._max_frame
        if len(message) <= mf:
            self._out(struct.pack(">I", len(message))[1:] + b"\x00\x00" + struct.pack(">I", _SID) + message)
            return
        self._out(b"".join(_frame(_DATA, 0, _SID, message[i : i + mf]) for i in range(0, len(message), mf)))

    def _unblock(self) -> None:
        while self._blocked and len(self._blocked[0]) <= min(self._conn_window, self._stream_window):
            self._write(self._blocked.popleft())

    def close(self) -> None:
        self._shut()

    # -- receiving --------------------------------------------------------------------------
    def _frames(self, data: bytes, now: int) -> None:
        """Cut frames out of what arrived: DATA here, the rest handed to the loop thread in order."""
        n = len(data)
        # The common case, one token: exactly one DATA frame (unpadded, stream open) carrying
        # exactly one gRPC message, nothing buffered. Straight to the message, no copies.
        if (
            not self._buf
            and not self._msg
            and n > 14
            and data[3] == _DATA
            and data[4] == 0
            and (data[0] << 16 | data[1] << 8 | data[2]) == n - 9
            and int.from_bytes(data[10:14], "big") == n - 14
        ):
            self._received += n - 9
            self.on_message(data[14:], now)
        else:
            self._cut(data, now)
        if self._received > (1 << 30):
            self._hand(self._refill, self._received)
            self._received = 0

    def _cut(self, data: bytes, now: int) -> None:
        """The general case: any number of frames, partial ones kept for the next read."""
        buf = self._buf
        buf += data
        pos, end = 0, len(buf)
        while end - pos >= 9:
            length = (buf[pos] << 16) | (buf[pos + 1] << 8) | buf[pos + 2]
            if end - pos < 9 + length:
                break
            ftype, flags = buf[pos + 3], buf[pos + 4]
            sid = ((buf[pos + 5] & 0x7F) << 24) | (buf[pos + 6] << 16) | (buf[pos + 7] << 8) | buf[pos + 8]
            start = pos + 9
            pos = start + length
            if ftype == _DATA:
                self._received += length
                payload = buf[start:pos]
                if flags & _PADDED:
                    payload = payload[1 : len(payload) - payload[0]]
                self._on_data(bytes(payload), now)
                if flags & _END_STREAM:
                    self._hand(self._end, 0, "")
            elif ftype == _HEADERS:
                self._hand(self._on_headers, flags, bytes(buf[start:pos]))
            elif ftype == _CONT:
                self._hand(self._on_continuation, flags, bytes(buf[start:pos]))
            else:
                self._hand(self._on_control, ftype, flags, sid, bytes(buf[start:pos]))
        del buf[:pos]

    def _refill(self, received: int) -> None:
        inc = struct.pack(">I", received)
        self._out(_frame(_WINDOW, 0, 0, inc) + _frame(_WINDOW, 0, _SID, inc))

    def _on_continuation(self, flags: int, payload: bytes) -> None:
        self._cont += payload
        if flags & _END_HEADERS:
            self._headers_complete(bytes(self._cont), self._cont_end)
            self._cont = bytearray()

    def _on_data(self, payload: bytes, now: int) -> None:
        msg = self._msg
        msg += payload
        pos = 0
        while len(msg) - pos >= 5:
            n = int.from_bytes(msg[pos + 1 : pos + 5], "big")
            if len(msg) - pos - 5 < n:
                break
            self.on_message(bytes(msg[pos + 5 : pos + 5 + n]), now)
            pos += 5 + n
        del msg[:pos]

    def _on_headers(self, flags: int, payload: bytes) -> None:
        payload = headers_fragment(flags, payload)
        if not flags & _END_HEADERS:
            self._cont, self._cont_end = bytearray(payload), bool(flags & _END_STREAM)
            return
        self._headers_complete(payload, bool(flags & _END_STREAM))

    def _headers_complete(self, block: bytes, end_stream: bool) -> None:
        try:
            headers = {bytes(k): bytes(v) for k, v in self._decoder.decode(block, raw=True)}
        except Exception as err:  # hpack errors: the connection is unusable
            self._end(STATUS_PROTOCOL, f"HPACK: {err}")
            return
        if not end_stream:
            return  # the response headers; trailers end the stream
        grpc_status = headers.get(b"grpc-status", b"0")
        status = 0 if grpc_status == b"0" else GRPC_STATUS_BASE + int(grpc_status)
        if headers.get(b":status", b"200") != b"200":
            status = int(headers[b":status"])
        self._end(status or STATUS_CONNECTION_CLOSED, headers.get(b"grpc-message", b"stream ended").decode())

    def _end(self, status: int, message: str) -> None:
        if not self.closed:
            self.closed = True
            self.on_end(status or STATUS_CONNECTION_CLOSED, message or "the server ended the stream")
            self._shut()

    def _on_control(self, ftype: int, flags: int, sid: int, payload: bytes) -> None:
        if ftype == _SETTINGS and not flags & _ACK:
            for i in range(0, len(payload) - 5, 6):
                ident, value = struct.unpack(">HI", payload[i : i + 6])
                if ident == 0x1:
                    self._decoder.header_table_size = value
                elif ident == 0x4:
                    self._stream_window += value - self._peer_initial
                    self._peer_initial = value
                elif ident == 0x5:
                    self._max_frame = value
            self._out(_frame(_SETTINGS, _ACK, 0, b""))
            self._unblock()
        elif ftype == _PING and not flags & _ACK:
            self._out(_frame(_PING, _ACK, 0, payload))
        elif ftype == _WINDOW:
            inc = struct.unpack(">I", payload[:4])[0] & 0x7FFFFFFF
            if sid == 0:
                self._conn_window += inc
            elif sid == _SID:
                self._stream_window += inc
            self._unblock()
        elif ftype == _RST and sid == _SID:
            code = struct.unpack(">I", payload[:4])[0] if len(payload) >= 4 else 0
            self._end(STATUS_CONNECTION_CLOSED, f"stream reset by the server (HTTP/2 error {code})")
        elif ftype == _GOAWAY:
            self._end(STATUS_CONNECTION_CLOSED, "server sent GOAWAY")


async def _connected(loop: asyncio.AbstractEventLoop, host: str, port: int) -> socket.socket:
    """A TCP socket connected to host:port (every address tried in turn, as create_connection does)."""
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    error: OSError = OSError(f"no address for {host}")
    for family, kind, proto, _, addr in infos:
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, addr)
            return sock
        except OSError as err:
            sock.close()
            error = err
    raise error


def stream_open_error(cfg: StreamConfig, err: OSError) -> ServerError:
    """The error of a gRPC stream that cannot be opened before a level (the server unreachable)."""
    return ServerError(
        f"cannot open a gRPC stream to {cfg.host}:{cfg.port}: {err.strerror or err}",
        hint="is the server's gRPC port right (-u HOST:GRPC_PORT with -i grpc)?",
    )


class H2StreamTransport(StreamTransport):
    """Streamed requests on one hand-written HTTP/2 gRPC stream, replaced when the server breaks it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, ledger: Ledger, cfg: StreamConfig) -> None:
        super().__init__(loop, ledger, cfg)
        self._h2: H2Stream | None = None
        self._queued: list[tuple[str, bytes]] = []  # waiting for the stream that replaces a broken one
        self._connecting = False

    async def _open(self) -> None:
        if self._h2 is not None and not self._h2.closed:
            return
        try:
            self._h2 = await self._connect()
        except OSError as err:
            raise stream_open_error(self.cfg, err) from None

    async def _connect(self) -> H2Stream:
        authority = f"{self.cfg.host}:{self.cfg.port}"
        holder: list[H2Stream] = []

        def on_end(status: int, message: str) -> None:
            if holder and holder[0] is self._h2:
                self._h2 = None
                self._stream_ended(status, message)

        h2 = H2Stream(
            authority, self.loop, self._on_message, on_end, metadata=self.cfg.headers, compression=self.cfg.compression
        )
        holder.append(h2)
        h2.start(await _connected(self.loop, self.cfg.host, self.cfg.port))
        self.ledger.connection_opened()
        return h2

    async def _reconnect(self) -> None:
        try:
            h2 = await self._connect()
        except OSError as err:
            queued, self._queued = self._queued, []
            now = perf_counter_ns()
            for rid, _ in queued:
                req = self.inflight.get(rid)
                if req is not None:
                    self._finish(rid, req, now, STATUS_CONNECTION_REFUSED, f"cannot reopen the gRPC stream: {err}")
            return
        finally:
            self._connecting = False
        self._h2 = h2
        queued, self._queued = self._queued, []
        if h2.closed:  # it died as it opened (its end was not ours to handle yet)
            self._h2 = None
            self.ledger.connection_lost()
            now = perf_counter_ns()
            for rid, _ in queued:
                req = self.inflight.get(rid)
                if req is not None:
                    self._finish(rid, req, now, STATUS_CONNECTION_CLOSED, "the new gRPC stream closed at once")
            return
        for rid, data in queued:
            if rid in self.inflight:
                h2.send(data)

    def _request(self, rid: str, index: int, seq: SeqFlags | None) -> bytes:
        return grpc_stream_request(self.cfg.payloads[index], rid, seq)

    def _transmit(self, rid: str, data: bytes) -> None:
        h2 = self._h2
        if h2 is not None and not h2.closed:
            h2.send(data)
            return
        self._queued.append((rid, data))
        if not self._connecting:
            self._connecting = True
            self.spawn(self._reconnect())

    def _on_message(self, raw: bytes, now: int) -> None:  # on the stream's reader thread
        on_stream_message(self, raw, now, self._finish_soon)

    def _finish_soon(self, rid: str, req: _Req, done_ns: int, status: int, message: str = "") -> None:
        self.loop.call_soon_threadsafe(self._finish, rid, req, done_ns, status, message)

    async def _close_stream(self) -> None:
        h2, self._h2 = self._h2, None
        if h2 is not None:
            h2.close()

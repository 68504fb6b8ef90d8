"""gRPC over a hand-written HTTP/2 client: the gRPC hot path, for requests of any size.

grpc.aio costs ~250 us of client CPU per call here; this transport writes prebuilt frames
per call (HEADERS with a stateless header block, the serialized request in DATA frames)
and parses only frame headers plus the trailers' grpc-status. HPACK decoding (the
`hpack` library) keeps the server's dynamic table in sync; blocks made only of indexed
fields change no table state and are decoded once, then cached.

Flow control (RFC 9113 section 5.2/6.9): we advertise huge receive windows. Sends honour
the server's connection window, its per-stream initial window and its max frame size
(Triton advertises 4 MiB for each, so an image-sized request goes out in one DATA frame
and one write); a request larger than the windows allow is sent in pieces as
WINDOW_UPDATEs arrive, in FIFO order.

GOAWAY: the connection leaves the rotation at once; streams the server says it will not
process (id > last-stream-id) are recorded as closed; the rest finish normally, then the
connection closes. A replacement is opened.
"""

from __future__ import annotations

import asyncio
import collections
import gzip
import struct
import zlib
from time import perf_counter_ns
from typing import Any

import hpack

from perfkit.loadgen._ledger import Ledger
from perfkit.loadgen._transport import Transport, no_delay, write_parts
from perfkit.records import (
    GRPC_STATUS_BASE,
    STATUS_CONNECTION_CLOSED,
    STATUS_CONNECTION_REFUSED,
    STATUS_PROTOCOL,
    STATUS_UNFINISHED,
    TlsSpec,
)
from perfkit.server.tls import client_context

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_DATA, _HEADERS, _RST, _SETTINGS, _PING, _GOAWAY, _WINDOW, _CONT = 0, 1, 3, 4, 6, 7, 8, 9
_END_STREAM, _ACK, _END_HEADERS, _PADDED, _PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
_SETTINGS_HEADER_TABLE, _SETTINGS_INITIAL_WINDOW, _SETTINGS_MAX_FRAME = 0x1, 0x4, 0x5
_BIG_WINDOW = 2**31 - 1
_DEFAULT_WINDOW = 65535  # RFC 9113 initial values, until the server's SETTINGS say otherwise
_DEFAULT_MAX_FRAME = 16384
GRPC_INFER = "/inference.GRPCInferenceService/ModelInfer"
H2_CONNECTIONS = 2  # HTTP/2 connections per engine (closed loop: at most one per request in flight)
SETTINGS_WAIT_S = 5.0


def headers_fragment(flags: int, payload: bytes) -> bytes:
    """A HEADERS frame's header block fragment: pad length, priority fields and padding removed
    (RFC 9113 section 6.2)."""
    pad = 0
    if flags & _PADDED:
        pad = payload[0]
        payload = payload[1:]
    if flags & _PRIORITY:
        payload = payload[5:]
    return payload[:-pad] if pad else payload


def _frame(ftype: int, flags: int, sid: int, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes((ftype, flags)) + struct.pack(">I", sid) + payload


def _string(data: bytes) -> bytes:
    # an HPACK string literal, not Huffman-coded: its length as a 7-bit-prefix integer (RFC 7541 5.1)
    n = len(data)
    if n < 127:
        return bytes((n,)) + data
    out, n = bytearray((127,)), n - 127
    while n >= 128:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out) + data


def _literal(name: bytes, value: bytes) -> bytes:
    # "literal header field without indexing, new name": stateless, so the block is reusable
    return b"\x00" + _string(name) + _string(value)


def header_block(
    authority: str,
    path: str,
    compression: str = "",
    *,
    https: bool = False,
    metadata: tuple[tuple[str, str], ...] = (),
) -> bytes:
    """The request header block, built once and sent unchanged with every call; `compression`
    ("gzip" or "deflate") names the messages' encoding; `metadata` (perf_analyzer's -H) goes along
    with lower-cased names, as gRPC metadata keys are."""
    return (
        b"\x83"  # :method POST (static table 3)
        + (b"\x87" if https else b"\x86")  # :scheme https / http (static table 7 / 6)
        + _literal(b":path", path.encode())
        + _literal(b":authority", authority.encode())
        + _literal(b"content-type", b"application/grpc")
        + _literal(b"te", b"trailers")
        + (_literal(b"grpc-encoding", compression.encode()) if compression else b"")
        + b"".join(_literal(k.lower().encode(), v.encode()) for k, v in metadata)
    )


def grpc_message(serialized: bytes, compression: str = "") -> bytes:
    """gRPC length-prefixed message: compressed flag + 4-byte big-endian length + bytes.

    With `compression` ("gzip" or "deflate", perf_analyzer's --grpc-compression-algorithm) the
    bytes are compressed once here, before the hot path, and the flag is set.
    """
    if compression == "gzip":
        body = gzip.compress(serialized, mtime=0)
    elif compression == "deflate":
        body = zlib.compress(serialized)
    else:
        return b"\x00" + struct.pack(">I", len(serialized)) + serialized
    return b"\x01" + struct.pack(">I", len(body)) + body


class _Blocked:
    """A request waiting for flow-control window; sid is 0 until its HEADERS are written."""

    __slots__ = ("due", "message", "offset", "sid", "window")

    def __init__(self, message: bytes, due: int) -> None:
        self.message, self.due = message, due
        self.offset = self.sid = self.window = 0


class H2Conn(asyncio.Protocol):
    """asyncio Protocol: one HTTP/2 connection carrying many concurrent unary calls."""

    def __init__(self, owner: H2Transport) -> None:
        self.owner = owner
        self._block = owner.block
        self._headers_head = struct.pack(">I", len(self._block))[1:] + bytes((_HEADERS, _END_HEADERS))
        self.transport: Any = None
        self.streams: dict[int, tuple[int, int]] = {}  # sid -> (due, sent)
        self._next_sid = 1
        self._buf = bytearray()
        self._decoder = hpack.Decoder()
        self._cache: dict[bytes, dict[bytes, bytes]] = {}
        self._send_window = _DEFAULT_WINDOW
        self._stream_window = _DEFAULT_WINDOW
        self._max_frame = _DEFAULT_MAX_FRAME
        self._received = 0
        self._blocked: collections.deque[_Blocked] = collections.deque()
        self._cont_sid = 0
        self._cont_block = bytearray()
        self._cont_end = False
        self.settled: asyncio.Future[None] = owner.loop.create_future()  # the server's SETTINGS arrived
        self.closed = False  # connection lost
        self.goaway = False  # no new streams
        self.ours = False  # closed by perfkit

    # -- asyncio.Protocol -------------------------------------------------------------------
    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        no_delay(transport, self.owner.largest_request_bytes)
        settings = struct.pack(">HI", 0x2, 0) + struct.pack(">HI", 0x4, _BIG_WINDOW)  # no push; big window
        transport.write(
            PREFACE + _frame(_SETTINGS, 0, 0, settings) + _frame(_WINDOW, 0, 0, struct.pack(">I", _BIG_WINDOW - 65535))
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.settled.done():
            self.settled.set_result(None)
        self.owner.lost(self, exc)

    def close(self, abort: bool = False) -> None:
        self.ours = True
        if self.transport is not None:
            if abort:
                self.transport.abort()
            else:
                self.transport.close()

    def owed(self) -> list[tuple[int, int]]:
        """Every request this connection owes a record for, as (due, sent); sent -1 if never sent."""
        out = list(self.streams.values())
        out += [(b.due, -1) for b in self._blocked if b.sid == 0]
        return out

    def forget(self) -> list[tuple[int, int]]:
        """Take every owed request off this connection (the caller records them)."""
        out = self.owed()
        self.streams = {}
        self._blocked.clear()
        return out

    # -- sending ----------------------------------------------------------------------------
    def send(self, message: bytes, due: int) -> None:
        """Start one call; `message` is the gRPC-framed request (5-byte prefix + protobuf)."""
        size = len(message)
        if self._blocked or size > self._send_window or size > self._stream_window:
            self._blocked.append(_Blocked(message, due))
            self._pump()
            return
        sid = self._next_sid
        self._next_sid += 2
        self._send_window -= size
        sid_b = struct.pack(">I", sid)
        self.streams[sid] = (due, perf_counter_ns())
        if size <= self._max_frame:
            self.transport.write(
                b"".join(
                    (
                        self._headers_head,
                        sid_b,
                        self._block,
                        struct.pack(">I", size)[1:],
                        bytes((_DATA, _END_STREAM)),
                        sid_b,
                        message,
                    )
                )
            )
            return
        self.transport.write(
            b"".join((self._headers_head, sid_b, self._block, *self._data_frames(sid_b, message, True)))
        )

    def _data_frames(self, sid_b: bytes, chunk: bytes | memoryview, last: bool) -> list[bytes | memoryview]:
        parts: list[bytes | memoryview] = []
        view = memoryview(chunk)
        step = self._max_frame
        for start in range(0, len(view), step):
            piece = view[start : start + step]
            end = last and start + step >= len(view)
            parts += (struct.pack(">I", len(piece))[1:], bytes((_DATA, _END_STREAM if end else 0)), sid_b, piece)
        return parts

    def _pump(self) -> None:
        # Send the blocked requests, head first, as far as the windows allow: the HEADERS and
        # DATA frames of what can go now leave in one writev, the tensor bytes uncopied.
        parts: list[bytes | memoryview] = []
        while self._blocked and not self.closed:
            head = self._blocked[0]
            if head.sid == 0:
                if len(head.message) > self._send_window and self._send_window < self._max_frame:
                    break  # wait for connection window before opening the stream
                head.sid = self._next_sid
                self._next_sid += 2
                head.window = self._stream_window
                self.streams[head.sid] = (head.due, perf_counter_ns())
                parts.append(self._headers_head + struct.pack(">I", head.sid) + self._block)
            n = min(len(head.message) - head.offset, self._send_window, head.window)
            if n <= 0:
                break
            chunk = memoryview(head.message)[head.offset : head.offset + n]
            head.offset += n
            self._send_window -= n
            head.window -= n
            last = head.offset == len(head.message)
            parts += self._data_frames(struct.pack(">I", head.sid), chunk, last)
            if not last:
                break
            self._blocked.popleft()
        if parts:
            write_parts(self.transport, parts)

    # -- receiving --------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        pos = 0
        end = len(buf)
        while end - pos >= 9:
            length = (buf[pos] << 16) | (buf[pos + 1] << 8) | buf[pos + 2]
            if end - pos < 9 + length:
                break
            ftype = buf[pos + 3]
            flags = buf[pos + 4]
            sid = ((buf[pos + 5] & 0x7F) << 24) | (buf[pos + 6] << 16) | (buf[pos + 7] << 8) | buf[pos + 8]
            start = pos + 9
            pos = start + length
            if ftype == _DATA:
                self._received += length
                if flags & _END_STREAM:
                    self._finish(sid, {})
            elif ftype == _HEADERS:
                self._on_headers(sid, flags, bytes(buf[start:pos]))
            elif ftype == _CONT:
                self._cont_block += buf[start:pos]
                if flags & _END_HEADERS:
                    self._headers_complete(self._cont_sid, bytes(self._cont_block), self._cont_end)
                    self._cont_block = bytearray()
            else:
                self._on_control(ftype, flags, sid, bytes(buf[start:pos]))
            if self.closed:
                return
        del buf[:pos]
        if self._received > (1 << 30):
            self.transport.write(_frame(_WINDOW, 0, 0, struct.pack(">I", self._received)))
            self._received = 0

    def _on_headers(self, sid: int, flags: int, payload: bytes) -> None:
        payload = headers_fragment(flags, payload)
        if not flags & _END_HEADERS:
            self._cont_sid, self._cont_block, self._cont_end = sid, bytearray(payload), bool(flags & _END_STREAM)
            return
        self._headers_complete(sid, payload, bool(flags & _END_STREAM))

    def _headers_complete(self, sid: int, block: bytes, end_stream: bool) -> None:
        headers = self._cache.get(block)
        if headers is None:
            try:
                decoded = self._decoder.decode(block, raw=True)
            except Exception as err:  # hpack errors: the connection is unusable
                self.owner.ledger.note(STATUS_PROTOCOL, f"HPACK: {err}")
                self.owner.failed(self, STATUS_PROTOCOL, f"HPACK: {err}")
                return
            headers = {bytes(k): bytes(v) for k, v in decoded}
            if all(b & 0x80 for b in block):  # indexed fields only: no table change, safe to reuse
                self._cache[block] = headers
            else:  # the dynamic table may have moved: cached indices could now mean other fields
                self._cache.clear()
        if end_stream:
            self._finish(sid, headers)

    def _finish(self, sid: int, headers: dict[bytes, bytes]) -> None:
        entry = self.streams.pop(sid, None)
        if entry is None:
            return
        done = perf_counter_ns()
        status = 0
        message = ""
        grpc_status = headers.get(b"grpc-status", b"0")
        http_status = headers.get(b":status", b"200")
        if http_status != b"200":
            status = int(http_status)
        elif grpc_status != b"0":
            status = GRPC_STATUS_BASE + int(grpc_status)
        if status:
            message = headers.get(b"grpc-message", b"").decode(errors="replace") or "gRPC call failed"
        self.owner.done(entry[0], entry[1], done, status, message)
        if self.goaway and not self.streams:
            self.close()

    def _on_control(self, ftype: int, flags: int, sid: int, payload: bytes) -> None:
        if ftype == _SETTINGS and not flags & _ACK:
            for i in range(0, len(payload) - 5, 6):
                ident, value = struct.unpack(">HI", payload[i : i + 6])
                if ident == _SETTINGS_HEADER_TABLE:
                    self._decoder.header_table_size = value
                elif ident == _SETTINGS_INITIAL_WINDOW:
                    delta = value - self._stream_window
                    self._stream_window = value
                    for b in self._blocked:  # RFC 9113 6.9.2: open streams' windows move by the change
                        if b.sid:
                            b.window += delta
                elif ident == _SETTINGS_MAX_FRAME:
                    self._max_frame = value
            self.transport.write(_frame(_SETTINGS, _ACK, 0, b""))
            if not self.settled.done():
                self.settled.set_result(None)
            self._pump()
        elif ftype == _PING and not flags & _ACK:
            self.transport.write(_frame(_PING, _ACK, 0, payload))
        elif ftype == _WINDOW:
            inc = struct.unpack(">I", payload[:4])[0] & 0x7FFFFFFF
            if sid == 0:
                self._send_window += inc
            elif self._blocked and self._blocked[0].sid == sid:
                self._blocked[0].window += inc
            self._pump()
        elif ftype == _RST:
            code = struct.unpack(">I", payload[:4])[0] if len(payload) >= 4 else 0
            entry = self.streams.pop(sid, None)
            if entry is not None:
                if self._blocked and self._blocked[0].sid == sid:
                    self._blocked.popleft()
                self.owner.done(
                    entry[0],
                    entry[1],
                    perf_counter_ns(),
                    STATUS_CONNECTION_CLOSED,
                    f"stream reset by the server (HTTP/2 error {code})",
                )
        elif ftype == _GOAWAY:
            last_sid = struct.unpack(">I", payload[:4])[0] & 0x7FFFFFFF if len(payload) >= 4 else 0
            self.goaway = True
            self.owner.retire(self)
            now = perf_counter_ns()
            message = "server sent GOAWAY; request not processed"
            for s in [s for s in self.streams if s > last_sid]:
                due, sent = self.streams.pop(s)
                self.owner.done(due, sent, now, STATUS_CONNECTION_CLOSED, message)
            # Requests still waiting for window will never be sent whole on this connection.
            blocked, self._blocked = list(self._blocked), collections.deque()
            for b in blocked:
                entry = self.streams.pop(b.sid, None) if b.sid else (b.due, -1)
                if entry is not None:
                    self.owner.done(entry[0], entry[1], now, STATUS_CONNECTION_CLOSED, message)
            if not self.streams:
                self.close()


class H2Transport(Transport):
    """A few HTTP/2 connections, requests round-robin over those not closing."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        ledger: Ledger,
        payloads: tuple[bytes, ...],
        host: str,
        port: int,
        compression: str = "",
        *,
        tls: TlsSpec | None = None,
        metadata: tuple[tuple[str, str], ...] = (),
    ) -> None:
        super().__init__(loop, ledger, tuple(grpc_message(p, compression) for p in payloads))
        self.host, self.port = host, port
        # gRPC over TLS: ALPN "h2"; the context is built in the worker process (it does not pickle)
        self._ssl = None if tls is None else client_context(tls, ("h2",))
        self._sni = None if tls is None else host
        self.block = header_block(f"{host}:{port}", GRPC_INFER, compression, https=tls is not None, metadata=metadata)
        self.conns: list[H2Conn] = []  # usable: open, no GOAWAY
        self.everyone: set[H2Conn] = set()  # every connection not yet lost
        self.pending: collections.deque[int] = collections.deque()  # due times waiting for a connection
        self._rr = 0
        self._want = H2_CONNECTIONS
        self._opening = False
        self.open_error = ""  # why the last connection attempt failed

    async def prepare(self, closed_loop: bool, share: int, rate_rps: float) -> None:
        self._want = max(1, min(share, H2_CONNECTIONS)) if closed_loop else H2_CONNECTIONS
        while len(self.conns) < self._want:
            if await self._open() is None:
                break

    def submit(self, due_ns: int) -> None:
        conns = self.conns
        if conns:
            self._rr += 1
            conns[self._rr % len(conns)].send(self.next_payload(), due_ns)
            return
        self.pending.append(due_ns)
        if not self._opening:
            self._opening = True
            self.spawn(self._open_for_pending())

    def done(self, due: int, sent: int, done: int, status: int, message: str) -> None:
        self.ledger.finish(due, sent, done, status, message)
        self.on_done(status)

    def retire(self, conn: H2Conn) -> None:
        """Take a connection out of rotation (GOAWAY or lost); open a replacement."""
        if conn in self.conns:
            self.conns.remove(conn)
            if not conn.ours:
                self.ledger.connection_lost()
                if not self._opening and len(self.conns) < self._want:
                    self._opening = True
                    self.spawn(self._open_for_pending())

    def failed(self, conn: H2Conn, status: int, message: str) -> None:
        """The connection is unusable (protocol error): record what it owed, drop it."""
        now = perf_counter_ns()
        self.retire(conn)
        self.everyone.discard(conn)
        for due, sent in conn.forget():
            self.done(due, sent, now, status, message)
        conn.close(abort=True)

    def lost(self, conn: H2Conn, exc: Exception | None) -> None:
        self.retire(conn)
        self.everyone.discard(conn)
        now = perf_counter_ns()
        message = str(exc) if exc else "the server (or a proxy) closed the HTTP/2 connection"
        for due, sent in conn.forget():
            self.done(due, sent, now, STATUS_CONNECTION_CLOSED, message)

    async def _open(self) -> H2Conn | None:
        try:
            _, conn = await self.loop.create_connection(
                lambda: H2Conn(self), self.host, self.port, ssl=self._ssl, server_hostname=self._sni
            )
        except OSError as err:
            self.open_error = str(err) or type(err).__name__
            return None
        try:
            # Sizes allowed (max frame, windows) come with the server's first SETTINGS.
            await asyncio.wait_for(asyncio.shield(conn.settled), SETTINGS_WAIT_S)
        except asyncio.TimeoutError:
            self.open_error = f"no HTTP/2 SETTINGS from the server in {SETTINGS_WAIT_S:g} s"
            conn.close(abort=True)
            return None
        if conn.closed:
            self.open_error = "the connection closed before the server's HTTP/2 SETTINGS arrived"
            return None
        self.ledger.connection_opened()
        self.conns.append(conn)
        self.everyone.add(conn)
        return conn

    async def _open_for_pending(self) -> None:
        try:
            conn = await self._open()
        finally:
            self._opening = False
        if conn is None:
            now = perf_counter_ns()
            while self.pending:  # nothing to send them on
                self.done(self.pending.popleft(), -1, now, STATUS_CONNECTION_REFUSED, self.open_error)
            return
        while self.pending and not conn.closed:
            conn.send(self.next_payload(), self.pending.popleft())
        if self.pending:  # lost again at once: try again
            self._opening = True
            self.spawn(self._open_for_pending())

    async def abort_in_flight(self, message: str) -> None:
        now = perf_counter_ns()
        while self.pending:
            self.done(self.pending.popleft(), -1, now, STATUS_UNFINISHED, message)
        for conn in list(self.everyone):
            owed = conn.forget()
            if owed:
                conn.close(abort=True)  # first: perfkit closed it, so it is no lost connection
                self.retire(conn)
                self.everyone.discard(conn)
            for due, sent in owed:
                self.done(due, sent, now, STATUS_UNFINISHED, message)

    async def close(self) -> None:
        await self.cancel_tasks()
        for conn in list(self.everyone):
            conn.close(abort=True)
        self.conns.clear()
        self.everyone.clear()

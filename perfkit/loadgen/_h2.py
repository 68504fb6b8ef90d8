"""A minimal HTTP/2 client for unary gRPC calls: the gRPC hot path.

grpc.aio costs ~250 us of client CPU per call here; this protocol writes two prebuilt
frames per call (HEADERS with a stateless header block, DATA with the serialized
request) and parses only frame headers plus the trailers' grpc-status. HPACK
decoding (the `hpack` library) keeps the server's dynamic table in sync; blocks made
only of indexed fields change no table state and are decoded once, then cached.
Flow control: we advertise huge receive windows; our sends respect the server's
connection window and fall back to queuing when it is exhausted.
"""

from __future__ import annotations

import asyncio
import collections
import socket
import struct
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any

import hpack

from perfkit.records import GRPC_STATUS_BASE, STATUS_CONNECTION_CLOSED, STATUS_PROTOCOL

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_DATA, _HEADERS, _RST, _SETTINGS, _PING, _GOAWAY, _WINDOW, _CONT = 0, 1, 3, 4, 6, 7, 8, 9
_END_STREAM, _ACK, _END_HEADERS, _PADDED, _PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
_BIG_WINDOW = 2**31 - 1
# Largest request the fast path sends in one DATA frame (HTTP/2's default max frame size).
MAX_FAST_PAYLOAD = 16384 - 5


def _frame(ftype: int, flags: int, sid: int, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes((ftype, flags)) + struct.pack(">I", sid) + payload


def _literal(name: bytes, value: bytes) -> bytes:
    # "literal header field without indexing, new name": stateless, so the block is reusable
    assert len(name) < 127 and len(value) < 127
    return b"\x00" + bytes((len(name),)) + name + bytes((len(value),)) + value


def header_block(authority: str, path: str) -> bytes:
    """The request header block, built once and sent unchanged with every call."""
    return (
        b"\x83"  # :method POST (static table 3)
        + b"\x86"  # :scheme http (static table 6)
        + _literal(b":path", path.encode())
        + _literal(b":authority", authority.encode())
        + _literal(b"content-type", b"application/grpc")
        + _literal(b"te", b"trailers")
    )


OnDone = Callable[["H2Conn", int, int, int, int], None]  # conn, due, sent, done, status


class H2Conn(asyncio.Protocol):
    """asyncio Protocol: one HTTP/2 connection carrying many concurrent unary calls."""

    def __init__(self, block: bytes, on_done: OnDone, examples: dict[int, str]) -> None:
        self._block = block
        self._headers_head = struct.pack(">I", len(block))[1:] + bytes((_HEADERS, _END_HEADERS))
        self.on_done = on_done
        self.examples = examples
        self.transport: Any = None
        self.streams: dict[int, tuple[int, int]] = {}  # sid -> (due, sent)
        self._next_sid = 1
        self._buf = bytearray()
        self._decoder = hpack.Decoder()
        self._cache: dict[bytes, dict[bytes, bytes]] = {}
        self._send_window = 65535
        self._received = 0
        self._blocked: collections.deque[tuple[bytes, int]] = collections.deque()
        self._cont_sid = 0
        self._cont_block = bytearray()
        self._cont_end = False
        self.closed = False

    # -- asyncio.Protocol -------------------------------------------------------------------
    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        settings = struct.pack(">HI", 0x2, 0) + struct.pack(">HI", 0x4, _BIG_WINDOW)  # no push; big window
        transport.write(
            PREFACE + _frame(_SETTINGS, 0, 0, settings) + _frame(_WINDOW, 0, 0, struct.pack(">I", _BIG_WINDOW - 65535))
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        now = perf_counter_ns()
        streams, self.streams = self.streams, {}
        if streams:
            self.examples.setdefault(STATUS_CONNECTION_CLOSED, str(exc or "server closed the HTTP/2 connection"))
        for due, sent in streams.values():
            self.on_done(self, due, sent, now, STATUS_CONNECTION_CLOSED)
        for _, due in self._blocked:
            self.on_done(self, due, -1, now, STATUS_CONNECTION_CLOSED)
        self._blocked.clear()

    # -- sending ----------------------------------------------------------------------------
    def send(self, message: bytes, due: int) -> None:
        """Start one call; `message` is the gRPC-framed request (5-byte prefix + protobuf)."""
        if len(message) > self._send_window or self._blocked:
            self._blocked.append((message, due))
            return
        self._write(message, due)

    def _write(self, message: bytes, due: int) -> None:
        sid = self._next_sid
        self._next_sid += 2
        self._send_window -= len(message)
        sid_b = struct.pack(">I", sid)
        self.streams[sid] = (due, perf_counter_ns())
        self.transport.write(
            b"".join(
                (
                    self._headers_head,
                    sid_b,
                    self._block,
                    struct.pack(">I", len(message))[1:],
                    bytes((_DATA, _END_STREAM)),
                    sid_b,
                    message,
                )
            )
        )

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
        del buf[:pos]
        if self._received > (1 << 30):
            self.transport.write(_frame(_WINDOW, 0, 0, struct.pack(">I", self._received)))
            self._received = 0

    def _on_headers(self, sid: int, flags: int, payload: bytes) -> None:
        pad = 0
        if flags & _PADDED:
            pad = payload[0]
            payload = payload[1:]
        if flags & _PRIORITY:
            payload = payload[5:]
        if pad:
            payload = payload[:-pad]
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
                self.examples.setdefault(STATUS_PROTOCOL, f"HPACK: {err}")
                self.transport.abort()
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
        grpc_status = headers.get(b"grpc-status", b"0")
        http_status = headers.get(b":status", b"200")
        if http_status != b"200":
            status = int(http_status)
        elif grpc_status != b"0":
            status = GRPC_STATUS_BASE + int(grpc_status)
        if status and status not in self.examples:
            self.examples[status] = headers.get(b"grpc-message", b"").decode(errors="replace")[:300]
        self.on_done(self, entry[0], entry[1], done, status)

    def _on_control(self, ftype: int, flags: int, sid: int, payload: bytes) -> None:
        if ftype == _SETTINGS and not flags & _ACK:
            for i in range(0, len(payload) - 5, 6):
                ident, value = struct.unpack(">HI", payload[i : i + 6])
                if ident == 0x1:
                    self._decoder.header_table_size = value
            self.transport.write(_frame(_SETTINGS, _ACK, 0, b""))
        elif ftype == _PING and not flags & _ACK:
            self.transport.write(_frame(_PING, _ACK, 0, payload))
        elif ftype == _WINDOW and sid == 0:
            self._send_window += struct.unpack(">I", payload[:4])[0] & 0x7FFFFFFF
            while self._blocked and len(self._blocked[0][0]) <= self._send_window:
                message, due = self._blocked.popleft()
                self._write(message, due)
        elif ftype == _RST:
            code = struct.unpack(">I", payload[:4])[0] if len(payload) >= 4 else 0
            self.examples.setdefault(STATUS_CONNECTION_CLOSED, f"stream reset by the server (HTTP/2 error {code})")
            entry = self.streams.pop(sid, None)
            if entry is not None:
                self.on_done(self, entry[0], entry[1], perf_counter_ns(), STATUS_CONNECTION_CLOSED)
        elif ftype == _GOAWAY:
            self.examples.setdefault(STATUS_CONNECTION_CLOSED, "server sent GOAWAY")
            self.transport.close()


def grpc_message(serialized: bytes) -> bytes:
    """gRPC length-prefixed message: uncompressed flag + 4-byte big-endian length + bytes."""
    return b"\x00" + struct.pack(">I", len(serialized)) + serialized

"""A pool of keep-alive HTTP/1.1 connections for streamed requests, one request at a time on each.

The Triton generate_stream transport (`_stream_sse`) and the OpenAI-compatible one (`_openai`)
differ only in how they read an answer; how a request finds a connection (an idle one, else a new
one, the request queued until it connects), how a refused connection fails the request it was
opened for, and how the pool is closed are this module's.
"""

from __future__ import annotations

import asyncio
import socket
from time import perf_counter_ns
from typing import Any

from perfkit.loadgen._stream_transport import StreamTransport
from perfkit.records import STATUS_CONNECTION_REFUSED


class KeepAliveConn(asyncio.Protocol):
    """One keep-alive connection of a KeepAlivePool; a subclass reads its answers (`_step`)."""

    def __init__(self, eng: KeepAlivePool) -> None:
        self.eng = eng
        self.closing = False  # perfkit closes it (no reconnect owed)
        self.transport: Any = None
        self.rid: str | None = None
        self.buf = bytearray()

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(self, rid: str, data: bytes) -> None:
        """Sends request `rid` (its bytes); the connection reads its answer next."""
        self.rid = rid
        self.begin(rid)
        self.transport.write(data)

    def begin(self, rid: str) -> None:
        """Resets what the last answer left (a subclass's per-answer state)."""

    def data_received(self, data: bytes) -> None:
        now = perf_counter_ns()
        self.buf += data
        while self.rid is not None and self._step(now):
            pass

    def _step(self, now: int) -> bool:
        """Reads what it can of the answer in self.buf; True when it may read more."""
        raise NotImplementedError

    def leave_pool(self) -> None:
        """The connection is gone: out of the pool, a lost connection counted unless perfkit closed it."""
        eng = self.eng
        eng.conns.discard(self)
        if self in eng.idle:
            eng.idle.remove(self)
        if not self.closing:
            eng.ledger.connection_lost()


class KeepAlivePool(StreamTransport):
    """Streamed requests over keep-alive HTTP/1.1 connections; `connection()` makes one."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.conns: set[KeepAliveConn] = set()
        self.idle: list[KeepAliveConn] = []
        self._queued: list[tuple[str, bytes]] = []

    def connection(self) -> KeepAliveConn:
        """A new connection object of this transport's kind."""
        raise NotImplementedError

    def _transmit(self, rid: str, data: bytes) -> None:
        if self.idle:
            self.idle.pop().send(rid, data)
            return
        self._queued.append((rid, data))
        self.spawn(self._connect())

    async def _connect(self) -> None:
        try:
            _, conn = await self.loop.create_connection(self.connection, self.cfg.host, self.cfg.port)
        except OSError as err:
            if self._queued:
                rid, _ = self._queued.pop(0)
                req = self.inflight.get(rid)
                if req is not None:
                    self._finish(rid, req, perf_counter_ns(), STATUS_CONNECTION_REFUSED, str(err))
            return
        self.ledger.connection_opened()
        self.conns.add(conn)
        while self._queued:
            rid, data = self._queued.pop(0)
            if rid in self.inflight:
                conn.send(rid, data)
                return
        self.idle.append(conn)

    async def _close_stream(self) -> None:
        for conn in list(self.conns):
            conn.closing = True
            if conn.transport is not None:
                conn.transport.abort()
        self.conns.clear()
        self.idle.clear()
        self._queued.clear()

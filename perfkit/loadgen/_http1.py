"""HTTP/1.1 transport: hand-written keep-alive connections, one request in flight on each.

Requests are prebuilt bytes (built once in `_requests`); the response parser reads only
the status line and Content-Length. A connection the peer closes while idle (a proxy or
load balancer reaping idle connections, the server restarting) leaves the idle pool at
once, so no request is ever written into a dead connection.
"""

from __future__ import annotations

import asyncio
import collections
from time import perf_counter_ns
from typing import Any

from perfkit.loadgen._ledger import Ledger
from perfkit.loadgen._transport import Transport, no_delay
from perfkit.records import (
    STATUS_CONNECTION_CLOSED,
    STATUS_CONNECTION_REFUSED,
    STATUS_PROTOCOL,
    STATUS_UNFINISHED,
    TlsSpec,
)
from perfkit.server.tls import client_context


class _HttpConn(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection carrying one request at a time."""

    __slots__ = ("buf", "code", "due", "need", "owner", "ours", "sent", "transport")

    def __init__(self, owner: Http1Transport) -> None:
        self.owner = owner
        self.buf = bytearray()
        self.need = -1
        self.code = 0
        self.sent = -1  # -1: no request owed on this connection
        self.due = -1
        self.ours = False  # closed by perfkit, not by the peer
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        no_delay(transport, self.owner.largest_request_bytes)

    def send(self, payload: bytes, due: int) -> None:
        self.due = due
        self.sent = perf_counter_ns()
        self.transport.write(payload)

    def close(self, abort: bool = False) -> None:
        self.ours = True
        if abort:
            self.transport.abort()
        else:
            self.transport.close()

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
                    self.owner.finished(self, STATUS_PROTOCOL, perf_counter_ns(), head[:200].decode(errors="replace"))
                    self.close(abort=True)  # the stream position is lost: the connection is unusable
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
        self.owner.finished(self, 0 if code == 200 else code, done, message)

    def eof_received(self) -> bool:
        return False  # the peer closed its side: close ours (connection_lost follows)

    def connection_lost(self, exc: Exception | None) -> None:
        self.owner.lost(self, exc)


class Http1Transport(Transport):
    """Keep-alive HTTP/1.1 connections; opened on demand, spares kept warm in open loop."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        ledger: Ledger,
        payloads: tuple[bytes, ...],
        host: str,
        port: int,
        *,
        tls: TlsSpec | None = None,
    ) -> None:
        super().__init__(loop, ledger, payloads)
        self.host, self.port = host, port
        # HTTPS: the context is built here, in the worker process (an SSLContext does not pickle)
        self._ssl = None if tls is None else client_context(tls)
        self._sni = None if tls is None else host
        self.conns: set[_HttpConn] = set()
        self.idle: list[_HttpConn] = []
        self.pending: collections.deque[int] = collections.deque()  # due times waiting for a connection
        self._opening = 0
        self.open_error = ""  # why the last connection attempt failed
        self._spare_target = 0

    async def prepare(self, closed_loop: bool, share: int, rate_rps: float) -> None:
        if closed_loop:
            self._spare_target = 0
            return
        # Keep spare connections open ahead of need: a send that must first connect is late.
        self._spare_target = 4 + int(rate_rps * 0.02)
        warm = max(4, int(rate_rps * 0.005) + 2)
        await asyncio.gather(*(self._open() for _ in range(max(0, warm - len(self.idle)))))

    def submit(self, due_ns: int) -> None:
        if self.idle:
            self.idle.pop().send(self.next_payload(), due_ns)
        else:
            self.pending.append(due_ns)
            if self._opening < len(self.pending):
                self._opening += 1
                self.spawn(self._open_for_pending())
        if self._spare_target and len(self.idle) + self._opening < self._spare_target:
            self._opening += 1
            self.spawn(self._open_for_pending())

    def finished(self, conn: _HttpConn, status: int, done: int, message: str) -> None:
        self.ledger.finish(conn.due, conn.sent, done, status, message)
        conn.sent = -1
        if status != STATUS_PROTOCOL:
            self._free(conn)
        self.on_done(status)

    def _free(self, conn: _HttpConn) -> None:
        if self.pending:
            conn.send(self.next_payload(), self.pending.popleft())
        else:
            self.idle.append(conn)

    def lost(self, conn: _HttpConn, exc: Exception | None) -> None:
        self.conns.discard(conn)
        if conn in self.idle:
            self.idle.remove(conn)
        if not conn.ours:
            self.ledger.connection_lost()
        if conn.sent >= 0:
            sent, conn.sent = conn.sent, -1
            self.ledger.finish(conn.due, sent, perf_counter_ns(), STATUS_CONNECTION_CLOSED, _reason(exc))
            self.on_done(STATUS_CONNECTION_CLOSED)

    async def _open(self) -> _HttpConn | None:
        try:
            _, conn = await self.loop.create_connection(
                lambda: _HttpConn(self), self.host, self.port, ssl=self._ssl, server_hostname=self._sni
            )
        except OSError as err:
            self.open_error = str(err) or type(err).__name__
            return None
        self.ledger.connection_opened()
        self.conns.add(conn)
        self.idle.append(conn)
        return conn

    async def _open_for_pending(self) -> None:
        try:
            conn = await self._open()
        finally:
            self._opening -= 1
        if conn is None:
            if self.pending:
                # The one request this opener was started for cannot be sent.
                self.ledger.finish(
                    self.pending.popleft(), -1, perf_counter_ns(), STATUS_CONNECTION_REFUSED, self.open_error
                )
                self.on_done(STATUS_CONNECTION_REFUSED)
            return
        if self.pending and conn in self.idle:
            self.idle.remove(conn)
            self._free(conn)

    async def abort_in_flight(self, message: str) -> None:
        now = perf_counter_ns()
        while self.pending:
            self.ledger.finish(self.pending.popleft(), -1, now, STATUS_UNFINISHED, message)
        for conn in list(self.conns):
            if conn.sent >= 0:
                sent, conn.sent = conn.sent, -1
                self.ledger.finish(conn.due, sent, now, STATUS_UNFINISHED, message)
                conn.close(abort=True)

    def end_level(self, closed_loop: bool) -> None:
        if closed_loop:  # closed-loop connections are per level; open-loop ones stay warm across levels
            for conn in list(self.conns):
                conn.close()
            self.idle.clear()

    async def close(self) -> None:
        await self.cancel_tasks()
        for conn in list(self.conns):
            conn.close(abort=True)
        self.idle.clear()


def _reason(exc: Exception | None) -> str:
    return str(exc) if exc else "the server (or a proxy) closed the connection"

"""A fault-injecting TCP proxy for tests: loopback only, bounded, on its own thread.

Sits between perfkit and a real server and breaks connections the way networks do:
  - close_after=N: a connection is closed when its (N+1)-th chunk from the client
    arrives (that chunk is not forwarded: the server never sees the request);
  - idle_close_s: a connection idle that long (no bytes either way) is closed, as
    proxies and Kubernetes load balancers reap idle connections;
  - reset_probability: each client chunk may instead reset the connection (RST);
  - stall(s): nothing is forwarded either way for s seconds (then all of it is);
  - goaway(): HTTP/2 only (h2=True): a GOAWAY frame is injected into every connection's
    server-to-client stream at a frame boundary, as a server shutting down would send;
  - outage()/restore(upstream): every connection is dropped and new ones are refused
    until restore, which may point the proxy at a new server (a restart).
With record_bytes=N it also keeps the first N bytes the clients sent (`client_bytes`), for
tests that look at what went on the wire (headers, compression flags).
Counters say what was injected. Bounded: at most MAX_CONNECTIONS at once.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import struct
import threading
import time
from typing import Any

MAX_CONNECTIONS = 256
_GOAWAY = struct.pack(">I", 8)[1:] + bytes((7, 0)) + struct.pack(">I", 0) + struct.pack(">II", 2**31 - 1, 0)


class _Link:
    def __init__(
        self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter, sr: asyncio.StreamReader, sw: asyncio.StreamWriter
    ) -> None:
        self.cr, self.cw, self.sr, self.sw = cr, cw, sr, sw
        self.chunks = 0
        self.last_io = time.monotonic()
        self.goaway_wanted = False
        self.s2c = bytearray()  # server-to-client bytes not yet forwarded (HTTP/2: part of a frame)

    def client_bytes_waiting(self) -> bool:
        """Bytes from the client not yet forwarded (in the reader's buffer, or in the socket's): the
        connection is not idle, however late this loop got to them on a loaded machine."""
        if getattr(self.cr, "_buffer", b""):  # StreamReader keeps what it read in _buffer (no public peek)
            return True
        sock = self.cw.get_extra_info("socket")
        if sock is None:
            return False
        with socket.socket(fileno=os.dup(sock.fileno())) as peek:
            try:
                return bool(peek.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
            except (BlockingIOError, InterruptedError):
                return False
            except OSError:
                return False

    def abort(self, rst: bool = False) -> None:
        for w in (self.cw, self.sw):
            if rst:
                sock = w.get_extra_info("socket")
                if sock is not None:  # SO_LINGER 0: close() sends RST, not FIN
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            w.transport.abort() if rst else w.close()


class FaultProxy:
    """Listen on 127.0.0.1:port, forward to upstream; see the module docstring for faults."""

    def __init__(
        self,
        upstream: tuple[str, int],
        *,
        close_after: int | None = None,
        idle_close_s: float | None = None,
        reset_probability: float = 0.0,
        h2: bool = False,
        seed: int = 0,
        record_bytes: int = 0,
    ) -> None:
        self.record_bytes = record_bytes
        self.client_bytes = bytearray()
        self.upstream = upstream
        self.close_after = close_after
        self.idle_close_s = idle_close_s
        self.reset_probability = reset_probability
        self.h2 = h2
        self._rng = random.Random(seed)
        self._links: set[_Link] = set()
        self._stalled_until = 0.0
        self._down = False
        self.accepted = self.closed_by_fault = self.resets = self.goaways = self.refused = 0
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="faultproxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fault proxy did not start")
        self.port: int = self._server.sockets[0].getsockname()[1]

    # -- control (any thread) ----------------------------------------------------------------
    def stall(self, seconds: float) -> None:
        self._stalled_until = time.monotonic() + seconds

    def goaway(self) -> None:
        self._call(self._goaway())

    def outage(self) -> None:
        self._call(self._outage())

    def restore(self, upstream: tuple[str, int] | None = None) -> None:
        if upstream is not None:
            self.upstream = upstream
        self._down = False

    def close(self) -> None:
        self._call(self._shutdown())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- loop side -------------------------------------------------------------------------------
    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self._server = self.loop.run_until_complete(asyncio.start_server(self._accept, "127.0.0.1", 0))
        self.loop.create_task(self._reaper())
        self._ready.set()
        self.loop.run_forever()
        self.loop.close()

    async def _shutdown(self) -> None:
        self._server.close()
        for link in list(self._links):
            link.abort()
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                task.cancel()

    async def _outage(self) -> None:
        self._down = True
        for link in list(self._links):
            link.abort(rst=True)
            self.closed_by_fault += 1

    async def _goaway(self) -> None:
        for link in list(self._links):
            if link.s2c:
                link.goaway_wanted = True  # mid-frame: the pump sends it after this frame
            else:
                self.goaways += 1
                link.cw.write(_GOAWAY)

    async def _reaper(self) -> None:
        while True:
            await asyncio.sleep(0.01)
            if self.idle_close_s is None:
                continue
            now = time.monotonic()
            for link in list(self._links):
                if now - link.last_io > self.idle_close_s and not link.client_bytes_waiting():
                    self._links.discard(link)
                    self.closed_by_fault += 1
                    link.abort()

    async def _accept(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        if self._down or len(self._links) >= MAX_CONNECTIONS:
            self.refused += 1
            cw.transport.abort()
            return
        try:
            sr, sw = await asyncio.open_connection(*self.upstream)
        except OSError:
            self.refused += 1
            cw.transport.abort()
            return
        self.accepted += 1
        link = _Link(cr, cw, sr, sw)
        self._links.add(link)
        try:
            await asyncio.gather(self._client_to_server(link), self._server_to_client(link))
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self._links.discard(link)
            link.abort()

    async def _wait_stall(self) -> None:
        while time.monotonic() < self._stalled_until:
            await asyncio.sleep(0.005)

    async def _client_to_server(self, link: _Link) -> None:
        while True:
            data = await link.cr.read(1 << 20)
            if not data:
                link.sw.close()
                return
            link.last_io = time.monotonic()
            link.chunks += 1
            if len(self.client_bytes) < self.record_bytes:
                self.client_bytes += data[: self.record_bytes - len(self.client_bytes)]
            if self.close_after is not None and link.chunks > self.close_after:
                self.closed_by_fault += 1
                link.abort()
                return
            if self.reset_probability and self._rng.random() < self.reset_probability:
                self.resets += 1
                link.abort(rst=True)
                return
            await self._wait_stall()
            link.sw.write(data)
            await link.sw.drain()

    async def _server_to_client(self, link: _Link) -> None:
        buf = link.s2c
        while True:
            data = await link.sr.read(1 << 20)
            if not data:
                link.cw.close()
                return
            link.last_io = time.monotonic()
            await self._wait_stall()
            if not self.h2:
                link.cw.write(data)
                await link.cw.drain()
                continue
            # HTTP/2: forward whole frames only, so a GOAWAY can go in between two of them.
            buf += data
            pos = 0
            while len(buf) - pos >= 9:
                length = int.from_bytes(buf[pos : pos + 3], "big")
                if len(buf) - pos < 9 + length:
                    break
                pos += 9 + length
            if pos:
                link.cw.write(bytes(buf[:pos]))
                del buf[:pos]
            if link.goaway_wanted:
                link.goaway_wanted = False
                self.goaways += 1
                link.cw.write(_GOAWAY)
            await link.cw.drain()

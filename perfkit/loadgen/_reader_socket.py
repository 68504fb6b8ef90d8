"""A socket read by a thread of its own, written from the event loop's thread without blocking.

Waking an event loop costs ~130-200 us of CPU on a busy VM where a thread blocked in
recv() wakes for ~50 (benchmarks/streaming_vs_perf_analyzer.py). The HTTP/2 clients
(`_stream_h2`, the gRPC stream; `_h2_thread`, unary gRPC) read this way: the reader thread
timestamps what arrives and cuts it into frames (`_frames`, theirs); whatever changes state
the loop thread owns goes to it in arrival order (`_hand`, call_soon_threadsafe).

The socket stays blocking: the reader sits in recv() (one syscall per wakeup); the loop
thread writes with MSG_DONTWAIT and hands what the kernel did not take to the loop's
writer callback. Closing is shutdown() (which wakes the reader) from the loop thread; the
socket is closed there once the reader has left recv(). The end of the connection, for
whatever reason, reaches `_on_lost` once, on the loop thread.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any

# The most buffers one sendmsg takes (Linux's IOV_MAX).
_IOV_MAX = 1024


async def connected(loop: asyncio.AbstractEventLoop, host: str, port: int) -> socket.socket:
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


class ReaderSocket:
    """The I/O half of a connection read on its own thread; subclasses parse (`_frames`) and react."""

    closed: bool  # shut: nothing more is written

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._sock: socket.socket | None = None
        self._wbuf = bytearray()  # bytes the kernel did not take yet (the loop's writer drains them)
        self._gone = False  # `_on_lost` ran
        self.closed = False

    def _start_reading(self, sock: socket.socket, name: str) -> None:
        sock.setblocking(True)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
        threading.Thread(target=self._read_loop, args=(sock,), name=name, daemon=True).start()

    def _frames(self, data: bytes, now: int) -> None:
        """What arrived (on the reader thread), with its arrival time."""
        raise NotImplementedError

    def _on_lost(self, exc: Exception | None) -> None:
        """The connection ended (peer close, reset, failed write, or our own close); on the loop thread, once."""
        raise NotImplementedError

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
            self._wbuf += memoryview(data)[sent:]
            self._loop.add_writer(sock.fileno(), self._flush)

    def _out_parts(self, parts: list[bytes | memoryview]) -> None:
        """`_out` of the parts joined, without joining them: one sendmsg (a large tensor goes out uncopied)."""
        sock = self._sock
        if sock is None or self.closed:
            return
        if self._wbuf or len(parts) > _IOV_MAX:
            self._out(b"".join(parts))
            return
        try:
            sent = sock.sendmsg(parts, (), socket.MSG_DONTWAIT)
        except BlockingIOError:
            sent = 0
        except OSError as err:
            self._lost(err)
            return
        for part in parts:
            size = len(part)
            if sent >= size:
                sent -= size
                continue
            self._wbuf += memoryview(part)[sent:]
            sent = 0
        if self._wbuf:
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
        """The connection died under us (reset, EOF, a failed write) or was closed: tell once, then shut it."""
        if not self._gone:
            self._gone = True
            self._on_lost(exc)
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

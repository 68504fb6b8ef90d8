"""The narrow interface between loop modes and transports, and the helpers they share."""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
from collections.abc import Callable, Iterator
from typing import Any

from perfkit.loadgen._ledger import Ledger
from perfkit.records import GRPC_STATUS_BASE, STATUS_CONNECTION_CLOSED, STATUS_CONNECTION_REFUSED

OnDone = Callable[[int], None]  # called with the status after each request's one record
# Outcomes that say the server could not be reached (gRPC UNAVAILABLE included: grpc.aio
# reports a refused or dropped connection that way): closed loops back off after them.
CONNECTION_STATUSES = (STATUS_CONNECTION_CLOSED, STATUS_CONNECTION_REFUSED, GRPC_STATUS_BASE + 14)


class Transport:
    """Carries requests to the server over some protocol; the loop modes drive it.

    Contract (what the accounting invariant, see `_ledger`, rests on):
      - `submit(due_ns)` is called after the loop mode's `ledger.begin()`; the transport
        then calls `ledger.finish(...)` exactly once for that request, then `on_done(status)`.
        It sends at once when it has a free connection, else queues the request and opens
        one; a request it cannot send (connection refused) is finished as refused.
      - sent_ns is taken just before the request's bytes are written; done_ns when its
        last response byte is parsed (both `perf_counter_ns`, see the package docstring).
      - `abort_in_flight(message)` finishes every request still owed as unfinished and
        drops the connections that carried them; afterwards nothing is owed.
      - `drain(deadline)` runs after the loop mode stopped: a transport that holds requests
        of its own (streaming: sequence steps waiting for their sequence) settles them there.
      - connections the peer closes are dropped from use at once (never written to
        again), reported with `ledger.connection_lost()`, and replaced on demand;
        each replacement calls `ledger.connection_opened()`.
    Everything runs on the engine's loop thread.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, ledger: Ledger, payloads: tuple[bytes, ...]) -> None:
        self.loop = loop
        self.ledger = ledger
        self.on_done: OnDone = _ignore
        self._payloads: Iterator[bytes] = itertools.cycle(payloads)
        self._single = payloads[0] if len(payloads) == 1 else None
        self.largest_request_bytes = max((len(p) for p in payloads), default=0)
        self._tasks: set[asyncio.Future[Any]] = set()

    async def prepare(self, closed_loop: bool, share: int, rate_rps: float) -> None:
        """Get ready for a level (warm connections): closed loop of `share` slots, or open loop at rate_rps."""

    def submit(self, due_ns: int) -> None:
        """Send one request (see the contract above); due_ns is -1 in closed loop."""
        raise NotImplementedError

    async def abort_in_flight(self, message: str) -> None:
        """Finish every request still owed as unfinished; drop the connections carrying them."""
        raise NotImplementedError

    def dropped(self, due_ns: int) -> None:
        """The open loop dropped a due request without submitting it (transports that number requests skip one)."""

    def model_of_dropped(self) -> int:
        """The mix's model a request the open loop drops is counted to (a mix draws it; one model: 0)."""
        return 0

    async def drain(self, deadline: float) -> None:
        """Stop starting requests of their own; wait (to `deadline`, loop time) until nothing is owed."""
        while self.ledger.in_flight > 0 and self.loop.time() < deadline:
            await asyncio.sleep(0.001)

    def end_level(self, closed_loop: bool) -> None:
        """A level ended with nothing owed: closed-loop connections are per level, close them."""

    async def close(self) -> None:
        """Release every connection and task."""
        await self.cancel_tasks()

    # -- helpers for subclasses ------------------------------------------------------------------
    def next_payload(self) -> bytes:
        return self._single if self._single is not None else next(self._payloads)

    def spawn(self, coro: Any) -> None:
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def cancel_tasks(self) -> None:
        # Cancelled tasks must run to their end before the loop stops, or asyncio warns
        # "Task was destroyed but it is pending" at exit.
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


def _ignore(status: int) -> None:
    pass


# A socket send buffer this size lets one write hand a whole image-sized request to the
# kernel; with the default (~16-64 KB at start) asyncio keeps the rest, copies it into its
# own buffer and needs more wake-ups to send it.
LARGE_SNDBUF_BYTES = 4 << 20


def no_delay(transport: Any, largest_request_bytes: int = 0) -> None:
    """Disable Nagle (requests are latency-bound); size the send buffer for large requests."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if largest_request_bytes > 65536:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, min(LARGE_SNDBUF_BYTES, 2 * largest_request_bytes))


# The most buffers one writev takes (Linux's IOV_MAX).
_IOV_MAX = 1024


def write_parts(transport: Any, parts: list[bytes | memoryview]) -> None:
    """Write `parts` as one message without joining them: one writev() of the buffers as they
    are (a large tensor is not copied on its way out), and only what the kernel did not take is
    joined and handed to the transport's own buffer, which then sends it in order.

    asyncio's `writelines` joins the parts first (Python 3.11); its `write` sends at once only
    while its buffer is empty, which is when this writes directly too, so the order holds.
    """
    sock = transport.get_extra_info("socket")
    sent = 0
    direct = sock is not None and len(parts) <= _IOV_MAX and not transport.is_closing()
    if direct and not transport.get_write_buffer_size():
        try:
            sent = os.writev(sock.fileno(), parts)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:  # a broken connection: let the transport meet the error its own way
            sent = 0
    if sent == 0:
        transport.write(b"".join(parts))
        return
    rest: list[bytes | memoryview] = []
    for part in parts:
        size = len(part)
        if sent >= size:
            sent -= size
            continue
        rest.append(memoryview(part)[sent:] if sent else part)
        sent = 0
    if rest:
        transport.write(b"".join(rest))

"""Loop modes: when requests are handed to the transport.

Closed loop (concurrency N): N requests in flight; each one's record triggers the next.
Open loop (request rate, custom intervals): requests are due on a schedule, independent
of responses; one that finds `max_outstanding` requests in flight is dropped.

Clock assumptions, relied on here:
  - due times are `t0_ns + offset` on `perf_counter_ns()`, which on Linux reads
    CLOCK_MONOTONIC; the event loop's `call_at` takes `time.monotonic()` seconds, the
    same clock, so `call_at(due_ns / 1e9)` wakes at the due time (to the timer's
    precision, see `_timer`). Both clocks are shared by every process of the machine,
    which is what lets worker processes pace one schedule from one t0.
  - a tick may run late (the loop was busy): every request whose due time has passed is
    sent at once, late, keeping its due time, so the corrected latency counts the delay
    (no coordinated omission).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from time import perf_counter_ns

from perfkit.loadgen._ledger import Ledger
from perfkit.loadgen._transport import CONNECTION_STATUSES, Transport
from perfkit.records import STATUS_DROPPED

# After a connection-level failure a closed-loop slot waits this long before its next
# request, so a server that is down yields a bounded trickle of "refused" records (and no
# busy loop) while it is retried; it comes back within one backoff of the server.
RECONNECT_BACKOFF_S = 0.05


class ClosedLoop:
    """`share` slots, each sending its next request as soon as the previous one is recorded."""

    def __init__(self, transport: Transport, ledger: Ledger, loop: asyncio.AbstractEventLoop, share: int) -> None:
        self.transport, self.ledger, self.loop, self.share = transport, ledger, loop, share
        self.active = False

    def start(self) -> None:
        self.active = True
        for _ in range(self.share):
            self._issue()

    def stop(self) -> None:
        self.active = False

    def _issue(self) -> None:
        if self.active:
            self.ledger.begin()
            self.transport.submit(-1)

    def on_done(self, status: int) -> None:
        if not self.active:
            return
        if status in CONNECTION_STATUSES:
            self.loop.call_later(RECONNECT_BACKOFF_S, self._issue)
        else:
            self._issue()


class OpenLoop:
    """Sends at due times from `dues` (ns offsets from t0_ns), whatever the responses do.

    `dues` is endless for a rate or interval schedule; a replayed trace's ends with it.
    """

    def __init__(
        self,
        transport: Transport,
        ledger: Ledger,
        loop: asyncio.AbstractEventLoop,
        dues: Iterator[int],
        t0_ns: int,
        max_outstanding: int,
    ) -> None:
        self.transport, self.ledger, self.loop = transport, ledger, loop
        self._dues, self._t0 = dues, t0_ns
        self.max_outstanding = max_outstanding
        self.active = False
        self._next_due = 0

    def start(self) -> None:
        self.active = True
        first = next(self._dues, None)
        if first is not None:  # a replayed trace may be empty
            self._next_due = self._t0 + first
            self.loop.call_at(self._next_due / 1e9, self._tick)

    def stop(self) -> None:
        self.active = False

    def on_done(self, status: int) -> None:
        pass  # responses do not pace an open loop

    def _tick(self) -> None:
        if not self.active:
            return
        now = perf_counter_ns()
        due = self._next_due
        while due <= now:
            self._dispatch(due)
            offset = next(self._dues, None)
            if offset is None:  # a replayed trace has run out
                return
            due = self._t0 + offset
            if due > now:
                now = perf_counter_ns()
        self._next_due = due
        self.loop.call_at(due / 1e9, self._tick)

    def _dispatch(self, due: int) -> None:
        ledger = self.ledger
        if ledger.in_flight >= self.max_outstanding:
            message = f"{self.max_outstanding} requests already in flight (max outstanding)"
            ledger.unsent(due, STATUS_DROPPED, message, self.transport.model_of_dropped())
            self.transport.dropped(due)
            return
        ledger.begin()
        self.transport.submit(due)

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
from dataclasses import dataclass
from time import perf_counter_ns

from perfkit.loadgen._ledger import Ledger
from perfkit.loadgen._stream_transport import StreamTransport
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


@dataclass(frozen=True)
class PeriodicSpec:
    """perf_analyzer's --periodic-concurrency-range START:END:STEP with --request-period N."""

    start: int
    end: int
    step: int
    request_period: int


class PeriodicLoop(ClosedLoop):
    """perf_analyzer's periodic concurrency (src/periodic_concurrency_manager.cc, _worker.cc, commit 263c5f6e).

    `start` slots, each a closed loop of one request (a slot's next request leaves when its
    previous one ends, as perf_analyzer's concurrency-1 workers do). Every time a request gets
    its `request_period`-th response, one "incomplete period" is struck off; when none is left,
    `step` more slots start (PeriodCompletedCallback, manager.cc:79-90) and must each see a
    request through its period before the next step. The run is over once `end` requests have
    ended (RequestCompletedCallback, manager.cc:93-100): `finished_ns` is then set and nothing more
    is sent. A request that ends before its period is an error, as in perf_analyzer
    (worker.cc:51-68): `error` says so and the run ends.

    Where perfkit differs: perf_analyzer adds slots while `steps_completed * step < end`
    (manager.cc:85-86), which ignores START and overshoots END when START != STEP (5:9:2 reaches 11
    slots); perfkit stops at END slots, as its help text says ('end' is the total concurrency).
    """

    def __init__(
        self, transport: StreamTransport, ledger: Ledger, loop: asyncio.AbstractEventLoop, spec: PeriodicSpec
    ) -> None:
        super().__init__(transport, ledger, loop, spec.start)
        self.spec = spec
        self.stream = transport
        self.incomplete = spec.start
        self.completed = 0
        self.finished_ns = 0  # when the END-th request ended (or the error): the run's end
        self.error = ""
        self.steps_ns: list[tuple[int, int]] = []  # (when, slots) each time slots were added
        transport.period = spec.request_period
        transport.on_period = self.on_period
        transport.short_finals = 0

    def start(self) -> None:
        self.steps_ns.append((perf_counter_ns(), self.share))
        super().start()

    def stop(self) -> None:
        super().stop()
        self.stream.period = 0

    def on_period(self) -> None:
        if not self.active:
            return
        self.incomplete -= 1
        if self.incomplete == 0 and self.share < self.spec.end:
            add = min(self.spec.step, self.spec.end - self.share)
            self.share += add
            self.incomplete = add
            self.steps_ns.append((perf_counter_ns(), self.share))
            for _ in range(add):
                self._issue()

    def on_done(self, status: int) -> None:
        if not self.active:
            return
        self.completed += 1
        if self.stream.short_finals:
            self.error = (
                "Request received final response before request period was reached. Request period must be"
                f" at most the total number of responses received by any request (--request-period"
                f" {self.spec.request_period})"
            )
        if self.error or self.completed >= self.spec.end:
            self.finished_ns = perf_counter_ns()
            self.stop()
            return
        super().on_done(status)

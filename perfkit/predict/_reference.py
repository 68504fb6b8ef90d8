"""The batcher simulator's open-loop rules as read, one event at a time: the loop the compiled one
(_simloop.py) is held to, batch for batch. Objects named after Triton's (triton-inference-server/
core, src/): the scheduler's queue and its batcher thread (dynamic_batch_scheduler.cc), the rate
limiter's payload queue (rate_limiter.cc, instance_queue.cc) and the model's instances. The rules
are those of _sim's module docstring; this module is slow (~50x the compiled loop) and plain.

Events happen at times; at one time, instances finishing come first, then an arrival, then the
batcher's timer. The batcher thread runs whenever something wakes it: an arrival that
DynamicBatchScheduler::Enqueue wakes it for, its timer, or a payload's callback (a payload taken by
an instance, an execution ended: Payload::Callback, set by BatcherThread). Each of its runs is
BatcherThread's loop, passed through until it waits.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import deque
from dataclasses import dataclass

_END, _ARRIVAL, _TIMER = 0, 1, 2  # the order of events at one time


@dataclass
class _Payload:
    """Requests first..first+size-1 (arrival order), formed by the batcher (Payload)."""

    first: int
    size: int


class Reference:
    """One open-loop run: arrivals `arr` (s, sorted) through the batcher and instances, run() giving
    each batch's size and end (s): max_batch_size `big` (1: no dynamic batching, each request its
    own payload), preferred sizes `pref` (rising; [big] where none), queue delay `delay_s`,
    `instances`, execution time by batch size `table` (s, 0..big), the device's shared fraction;
    None once more than give_up's allowed requests from its first counted one took longer than
    its bound (s)."""

    def __init__(
        self,
        arr: list[float],
        big: int,
        pref: list[int],
        delay_s: float,
        instances: int,
        table: list[float],
        shared_fraction: float,
        give_up: tuple[float, int, int],
    ) -> None:
        if big == 1:  # rule 1: no batcher, a payload a request, straight to the instances
            pref, delay_s = [1], 0.0
        self.arr, self.n = arr, len(arr)
        self.big, self.pref, self.pmax, self.delay = big, pref, pref[-1], delay_s
        self.table, self.f = table, shared_fraction
        self.bound, self.counted_from, self.allowed = give_up
        self.over = 0
        self.dev = 0.0  # when the shared device is next free (Contention)
        # The scheduler's queue: requests head..arrived-1 (DynamicBatchScheduler::queue_).
        self.head = 0
        self.arrived = 0
        # The batcher thread's state (BatcherThread, GetDynamicBatch).
        self.current: _Payload | None = None  # curr_payload_ while waiting and growable
        self.renew = False  # payload_saturated_ or the current payload taken: NewPayload next
        self.next_preferred = 0  # next_preferred_batch_size_
        self.timer = math.inf  # when the batcher's wait runs out
        # The rate limiter: payloads waiting for an instance, at most two an instance
        # (RateLimiter::PayloadSlotAvailable); the instances, busy until.
        self.waiting: deque[_Payload] = deque()
        self.slots = 2 * instances
        self.busy_until: list[float | None] = [None] * instances
        self.sizes: list[int] = []
        self.ends: list[float] = []
        self.done = 0

    # -- the instances (RateLimiter::DequeuePayload, InstanceQueue::Dequeue) --

    def take(self, i: int, t: float) -> None:
        """Instance i takes the first waiting payload at t, merged with the unsaturated ones after
        it whose oldest request has waited longer than the queue delay, up to max_batch_size
        (InstanceQueue::Dequeue); the batch runs (Contention) and ends."""
        p = self.waiting.popleft()
        first, m = p.first, p.size
        taken = [p]
        if self.delay > 0 and self.big > 1:
            while self.waiting:
                nxt = self.waiting[0]
                if not (t > self.arr[nxt.first] + self.delay and m + nxt.size <= self.big):
                    break
                m += nxt.size
                taken.append(self.waiting.popleft())
        if any(q is self.current for q in taken):
            self.current, self.renew = None, True  # the payload is executing: stale
        s = self.table[m]
        if self.f > 0:
            start = max(t + (1 - self.f) * s, self.dev)
            end = self.dev = start + self.f * s
        else:
            end = t + s
        self.busy_until[i] = end
        self.sizes.append(m)
        self.ends.append(end)
        self.done += m
        if end - self.arr[first] > self.bound and first >= self.counted_from:
            self.over += bisect.bisect_left(self.arr, end - self.bound, first, first + m) - first

    def feed(self, t: float) -> bool:
        """Idle instances take waiting payloads; True if any did (each take wakes the batcher)."""
        took = False
        for i, busy in enumerate(self.busy_until):
            if busy is None and self.waiting:
                self.take(i, t)
                took = True
        return took

    # -- the batcher thread (DynamicBatchScheduler::BatcherThread, GetDynamicBatch) --

    def batcher_step(self, t: float) -> bool:
        """One pass of BatcherThread's loop at t: True if it formed or grew a payload (the loop
        goes round again at once), False once it waits (for its timer or to be woken)."""
        if self.renew:  # NewPayload
            self.current, self.renew, self.next_preferred = None, False, 0
        queued = self.arrived - self.head
        self.timer = math.inf
        if queued == 0 or len(self.waiting) >= self.slots:
            return False  # nothing queued, or no payload slot (WaitForPayloadSlotAvailable)
        p_size = self.current.size if self.current is not None else 0
        room = self.big - p_size
        scan = min(queued, room)  # the pending batch: the cursor stops at max_batch_size
        best = 0  # the largest preferred size the payload and pending batch reach
        for size in self.pref:
            if 1 <= size - p_size <= scan:
                best = size - p_size
        exceeded = self.delay > 0 and t >= self.arr[self.head] + self.delay
        if best > 0 and not exceeded:
            take, saturated = best, self.delay == 0
        elif queued > room or p_size + scan >= self.pmax:
            take, saturated = scan, True
        elif exceeded or self.delay == 0:
            take, saturated = scan, False
        else:
            self.next_preferred = next(s for s in self.pref if s > p_size + scan) - p_size
            if p_size != 0 and p_size not in self.pref:
                take, saturated = scan, False  # grow a scheduled payload that is not preferred
            else:
                self.timer = self.arr[self.head] + self.delay
                return False
        if self.current is None:
            self.current = _Payload(self.head, take)
            self.waiting.append(self.current)  # RateLimiter::EnqueuePayload
        else:
            self.current.size += take
        self.head += take
        self.renew = self.renew or saturated
        return True

    def wake_on_arrival(self) -> bool:
        """Whether DynamicBatchScheduler::Enqueue wakes the batcher for the request just queued."""
        slot = len(self.waiting) < self.slots
        return slot and (self.renew or self.arrived - self.head >= self.next_preferred)

    # -- the run --

    def run(self) -> tuple[list[int], list[float]] | None:
        events: list[tuple[float, int, int]] = []
        if self.n:
            heapq.heappush(events, (self.arr[0], _ARRIVAL, 0))
        timer_at = math.inf  # the timer event pushed last
        while self.done < self.n:
            t, kind, key = heapq.heappop(events)
            wake = False
            if kind == _END:
                if self.busy_until[key] != t:
                    continue
                self.busy_until[key] = None
                wake = True  # the execution's callback
            elif kind == _ARRIVAL:
                self.arrived += 1
                if self.arrived < self.n:
                    heapq.heappush(events, (self.arr[self.arrived], _ARRIVAL, self.arrived))
                wake = self.wake_on_arrival()
            else:
                if t != self.timer:
                    continue
                wake = True
            busy_before = list(self.busy_until)
            while True:
                wake = self.feed(t) or wake
                if not wake:
                    break
                wake = self.batcher_step(t)
            if self.over > self.allowed:
                return None
            for i, end in enumerate(self.busy_until):
                if end is not None and end != busy_before[i]:
                    heapq.heappush(events, (end, _END, i))
            if self.timer != timer_at and self.timer < math.inf:
                heapq.heappush(events, (self.timer, _TIMER, 0))
            timer_at = self.timer
        return self.sizes, self.ends

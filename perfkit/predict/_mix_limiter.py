"""The event loop of a simulated mix (run_mix), its instances allocated freely or by Triton's rate
limiter between the models (the server run with `--rate-limit execution_count`): under the limiter
an instance executes only once the resources it claims are free, and among the instances ready to
run the one of least scaled priority goes first.

The rules, from triton-inference-server/core src/rate_limiter.cc:
1. An instance with a payload to run and nothing running is staged (RateLimiter::ModelContext::
   StageInstanceIfAvailable, at RateLimiter::EnqueuePayload and again at RateLimiter::OnRelease
   while its model has requests pending): one staged instance per payload waiting.
2. The staged instances form one heap across every model; its top is the one of least
   ScaledPriority = exec_count x max(priority, 1) (RateLimiter::ModelInstanceContext::
   ScaledPriority; ScaledPriorityComparator makes the std::priority_queue a min-heap). Ties go to
   the one staged first (std::priority_queue leaves them unspecified; a choice here).
3. RateLimiter::AttemptAllocation allocates the top only, when every resource it claims is free
   (RateLimiter::ResourceManager::AllocateResources): a top that must wait blocks the others,
   claimers or not. Here the allocation repeats while the top fits (each stage and each release
   attempts once in Triton, and each allocation follows one of them).
4. The resources are held for the whole execution and released at its end, the instance's
   exec_count counted first (RateLimiter::ModelInstanceContext::Release, then OnRelease).
5. A resource's count is the largest any instance claims (ResourceManager::UpdateMaxResource) unless
   the server is given --rate-limit-resource: `total`.

Each member claims `claim` units of the one resource (perfkit's knob claims 1, global: the
device the mix's models share; 0: no rate_limiter block, which allocates at once when on top).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from typing import Any, Protocol

from perfkit.predict._reference import _ARRIVAL, _END, _TIMER


class LimitedRun(Protocol):
    """A model's batcher and instances as the limiter drives them (_mix._Member)."""

    busy_until: list[float | None]
    waiting: Any
    timer: float
    arr: list[float]
    arrived: int
    n: int
    done: int
    priority: int
    claim: int

    def take(self, i: int, t: float) -> None: ...
    def feed(self, t: float) -> bool: ...
    def batcher_step(self, t: float) -> bool: ...
    def wake_on_arrival(self) -> bool: ...


class Allocation(Protocol):
    """How a mix's idle instances take the payloads their batchers formed (run_mix): each as its
    own model's batcher forms them (FreeInstances), or as Triton's rate limiter allocates them
    across the models (DeviceLimiter)."""

    def reach(self, j: int) -> Sequence[int]:
        """The models whose instances an event of model j can set running."""
        ...

    def allocate(self, t: float, models: Sequence[int]) -> set[int]:
        """Payloads taken at t, `models`' pending ones offered; the models whose instances took one."""
        ...

    def release(self, j: int, i: int) -> None:
        """Model j's instance i ended its execution."""
        ...


class FreeInstances:
    """No rate limiter: an idle instance takes its own model's next payload at once (Reference.feed)."""

    def __init__(self, runs: Sequence[LimitedRun]) -> None:
        self.runs = runs

    def reach(self, j: int) -> Sequence[int]:
        return (j,)  # each model's instances take its own payloads alone

    def allocate(self, t: float, models: Sequence[int]) -> set[int]:
        took = set()
        for k in models:
            if self.runs[k].feed(t):
                took.add(k)
        return took

    def release(self, j: int, i: int) -> None:
        pass  # nothing is held beyond the instance itself


class DeviceLimiter:
    """The rate limiter's staged heap and resource count over every model of a mix (rules 1-5)."""

    def __init__(self, runs: Sequence[LimitedRun], total: int | None = None) -> None:
        self.runs = runs
        self.free = total if total is not None else max((r.claim for r in runs), default=0)
        self.exec_count: dict[tuple[int, int], int] = {}
        self.held: dict[tuple[int, int], int] = {}
        self.staged: set[tuple[int, int]] = set()
        self.heap: list[tuple[int, int, int, int]] = []
        self.seq = 0
        self.order: list[tuple[int, int]] = []  # (model, instance) of each allocation, in order

    def stage(self, j: int) -> None:
        """Rule 1: model j's idle instances staged, one per payload waiting beyond those staged."""
        r = self.runs[j]
        mine = sum(1 for k, _ in self.staged if k == j)
        want = len(r.waiting) - mine
        for i, busy in enumerate(r.busy_until):
            if want <= 0:
                break
            if busy is None and (j, i) not in self.staged and (j, i) not in self.held:
                scaled = self.exec_count.get((j, i), 0) * max(r.priority, 1)
                heapq.heappush(self.heap, (scaled, self.seq, j, i))
                self.seq += 1
                self.staged.add((j, i))
                want -= 1

    def reach(self, j: int) -> Sequence[int]:
        return range(len(self.runs))  # one heap and one resource across every model

    def allocate(self, t: float, models: Sequence[int]) -> set[int]:
        """Rule 1 for `models`, then rules 2-3: the top allocated while its claim fits; the models
        whose instances took (any model's: the heap is shared)."""
        for k in models:
            self.stage(k)  # a release leaves its model's pending payloads to stage again
        took: set[int] = set()
        while self.heap:
            _, _, j, i = self.heap[0]
            r = self.runs[j]
            if r.claim > self.free:
                break
            heapq.heappop(self.heap)
            self.staged.discard((j, i))
            if not r.waiting:
                continue  # its payload was merged into another instance's batch
            self.free -= r.claim
            self.held[(j, i)] = r.claim
            self.order.append((j, i))
            r.take(i, t)
            took.add(j)
        return took

    def release(self, j: int, i: int) -> None:
        """Rule 4: an execution ended: its exec_count counted, its claim freed."""
        self.exec_count[(j, i)] = self.exec_count.get((j, i), 0) + 1
        self.free += self.held.pop((j, i), 0)


def run_mix(runs: Sequence[LimitedRun], allocation: Allocation) -> None:
    """Reference.run's loop over every model of a mix at once: one heap of events (instances
    ending, then arrivals, then timers at one time); at each event the instances take what
    `allocation` gives them, and every model woken (its instance took a payload: Payload::Callback,
    or its event's own) runs its batcher until it waits, each new payload allocated again."""
    events: list[tuple[float, int, int, int]] = []
    timer_at = [math.inf] * len(runs)
    for j, r in enumerate(runs):
        if r.n:
            heapq.heappush(events, (r.arr[0], _ARRIVAL, j, 0))
    while events:
        t, kind, j, key = heapq.heappop(events)
        r = runs[j]
        woken: set[int] = set()
        if kind == _END:
            if r.busy_until[key] != t:
                continue
            r.busy_until[key] = None
            allocation.release(j, key)
            woken.add(j)
        elif kind == _ARRIVAL:
            r.arrived += 1
            if r.arrived < r.n:
                heapq.heappush(events, (r.arr[r.arrived], _ARRIVAL, j, r.arrived))
            if r.wake_on_arrival():
                woken.add(j)
        else:
            if t != r.timer:
                continue
            woken.add(j)
        reach = allocation.reach(j)
        busy_before = {k: list(runs[k].busy_until) for k in reach}
        woken |= allocation.allocate(t, reach)
        while woken:
            k = woken.pop() if len(woken) == 1 else min(woken)
            woken.discard(k)
            # Reference.run's inner loop, its feed the allocation's. Its first feed is left out: the
            # last thing done was an allocation (the one above, or the end of the last model's
            # loop) and nothing has changed since, so it would take nothing.
            while True:
                wake = runs[k].batcher_step(t)
                took = allocation.allocate(t, (k,))
                if took:
                    wake = wake or k in took
                    woken.update(took)
                    woken.discard(k)
                if not wake:
                    break
        for k in reach:
            x = runs[k]
            for i, end in enumerate(x.busy_until):
                if end is not None and end != busy_before[k][i]:
                    heapq.heappush(events, (end, _END, k, i))
            if x.timer != timer_at[k] and x.timer < math.inf:
                heapq.heappush(events, (x.timer, _TIMER, k, 0))
            timer_at[k] = x.timer
    if any(r.done < r.n for r in runs):
        raise AssertionError("the mix's event loop ran out of events before every request ran")

"""A BLS model and the models it calls, simulated together (perfkit.predict._pipeline runs it for a
pipeline given a fan-out): step 0 is the BLS model, steps 1.. the models its code calls, each
`fanout[j - 1]` times a request, one call after another.

How a BLS model holds its instance (triton-inference-server/python_backend, README "Business
Logic Scripting"): `InferenceRequest.exec()` is blocking, so the model's `execute` waits on each
call and its instance stays taken until `execute` returns, answering every request of the
batch it was given; `async_exec` lets calls overlap, which this model does not follow (the
calibration tells overlapping calls from the statistics and measures instead,
tuner/_search/_bls_calls.py). So a request takes a free instance of the BLS model (its queue and
batcher as the config says), runs its own part (the BLS model's time outside its calls,
ServiceModel.service_us(1) per request) and then its calls in order: each call joins the called
model's queue, runs through its batcher and instances, and the next call is issued when its
answer returns. A batch of m requests runs them one after another on the instance it took, and
each is answered when the whole batch is done.

The called models' batchers follow the rule perfkit.predict._sim's closed loop keeps (_dispatch:
a batch is read off the queue when an instance is free, waiting for a preferred size while the
oldest call's queue delay lasts), since what arrives next depends on what is answered: at most
one call per BLS instance is ever queued, so formed-ahead payloads (rule 3 there) change little.
Instances share their device as Contention says (the shared part of each execution one at a
time). An event loop in Python: the calls' feedback cannot go through the compiled open loop.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from perfkit.errors import UsageError
from perfkit.predict._rate import ceiling_rps
from perfkit.predict._sim import WARMUP_FRACTION, _batch_plan

if TYPE_CHECKING:
    from perfkit.predict._pipeline import PipelineStep

BLS_REQUESTS = 2_000  # per simulated run: the event loop is Python's (~20 us an event)

_ARRIVE, _TIMER, _CALL, _DONE = 0, 1, 2, 3


def check_fanout(steps: Sequence[PipelineStep], fanout: Sequence[int]) -> None:
    """Raises UsageError unless there is one whole, non-negative fan-out per called model."""
    if len(fanout) != len(steps) - 1 or any(int(f) != f or f < 0 for f in fanout):
        raise UsageError(
            f"BLS fan-out {list(fanout)} for {len(steps) - 1} called models",
            hint="give one whole number of calls per request for each model after the BLS model",
        )


def ceilings_rps(steps: Sequence[PipelineStep], fanout: Sequence[int]) -> list[float]:
    """Each step's most BLS requests per second: the BLS model's instances, each held for its own
    time plus every call's execution of one; a called model's own ceiling over its calls a request."""
    check_fanout(steps, fanout)
    bls = steps[0]
    held_us = bls.service.service_us(1) + sum(f * s.service.service_us(1) for s, f in zip(steps[1:], fanout))
    out = [bls.config.instances * 1e6 / held_us if held_us > 0 else math.inf]
    for s, f in zip(steps[1:], fanout):
        out.append(ceiling_rps(s.config, s.service, s.contention) / f if f > 0 else math.inf)
    return out


def floor_us(steps: Sequence[PipelineStep], fanout: Sequence[int], overhead_us: float = 0.0) -> float:
    """A request alone: the BLS model's own time and each call's queue delay (where its batcher
    waits for a preferred size above 1) plus its execution of one, times its fan-out."""
    check_fanout(steps, fanout)
    total = steps[0].service.service_us(1) + overhead_us
    for s, f in zip(steps[1:], fanout):
        cfg = s.config
        wait = cfg.max_queue_delay_us if cfg.batching and cfg.preferred()[0] > 1 else 0.0
        total += f * (wait + s.service.service_us(1))
    return total


@dataclass
class _Station:
    """One model's queue, batcher and instances in the event loop."""

    step: PipelineStep
    plan: tuple[int, int, int, list[int], float]
    free: int
    queue: deque[tuple[float, int]] = field(default_factory=deque)  # (arrival s, job or request)
    dev: float = 0.0  # when the shared device is next free
    timer: float = math.nan  # the queue-delay deadline a timer event is set for

    def take(self, now: float) -> int | None:
        """How many queued to start now on a free instance (None: wait for more, or nothing to do)."""
        if self.free <= 0 or not self.queue:
            return None
        big, pmin, _pmax, pref, delay = self.plan
        if big == 1:
            return 1
        pending = min(len(self.queue), big)
        deadline = self.queue[0][0] + delay
        exceeded = delay > 0 and now >= deadline
        if delay > 0 and not exceeded and pending < pmin:
            return None
        if not exceeded and pending >= pmin:
            return max(p for p in pref if p <= pending)
        return pending

    def deadline(self) -> float:
        return self.queue[0][0] + self.plan[4]


class _Job:
    """One execution of the BLS model: its requests, run one after another, and where it is."""

    __slots__ = ("requests", "pos", "call", "made")

    def __init__(self, requests: list[int], called: int) -> None:
        self.requests = requests
        self.pos = 0  # the request running
        self.call = 0  # its next call, in the request's calls
        self.made = [0] * called  # its calls of each called model so far


def run_bls(
    steps: Sequence[PipelineStep],
    fanout: Sequence[int],
    due: np.ndarray,
    overhead_s: float,
    give_up: tuple[float, float] | None,
) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] | None:
    """Every request of a sorted arrival list (s) through the BLS model and its calls: (answer
    times, per step (arrivals, answers, batch sizes)); step 0's per request, its "arrival" the
    start of the execution it ran in (its answer the execution's end), a called model's per call,
    request by request.
    give_up = (latency bound s, kept requests allowed past it): None once more are past it."""
    check_fanout(steps, fanout)
    n = len(due)
    skip = int(n * WARMUP_FRACTION)
    fan = [int(f) for f in fanout]
    seq = [j for j, f in enumerate(fan, start=1) for _ in range(f)]  # the calls of one request, in order
    stations = [_Station(s, _batch_plan(s.config), s.config.instances) for s in steps]
    own_s = steps[0].service.service_us(1) / 1e6
    tables = [[0.0] + [s.service.service_us(k) / 1e6 for k in range(1, st.plan[0] + 1)]
              for s, st in zip(steps, stations, strict=True)]  # fmt: skip
    per = [(np.zeros(n), np.zeros(n), np.zeros(n, dtype=np.int64))]
    per += [(np.zeros(n * f), np.zeros(n * f), np.zeros(n * f, dtype=np.int64)) for f in fan]
    done = np.zeros(n)
    late = 0
    bound, allowed = give_up if give_up is not None else (math.inf, math.inf)
    jobs: list[_Job] = []
    events: list[tuple[float, int, int, int, object]] = [(float(t), i, _ARRIVE, i, None) for i, t in enumerate(due)]
    heapq.heapify(events)
    order = n

    def push(t: float, kind: int, a: int, b: object = None) -> None:
        nonlocal order
        order += 1
        heapq.heappush(events, (t, order, kind, a, b))

    def call(j: int, now: float) -> None:
        """Job j's next call joins the called model's queue (its index: request by request)."""
        job = jobs[j]
        k = seq[job.call]
        idx = job.requests[job.pos] * fan[k - 1] + job.made[k - 1]
        job.made[k - 1] += 1
        per[k][0][idx] = now
        stations[k].queue.append((now, idx))
        tokens[k].append(j)
        dispatch(k, now)

    def answered(j: int, now: float) -> None:
        """Job j's call was answered: its next call, the next request's own part, or its end."""
        nonlocal late
        job = jobs[j]
        job.call += 1
        if job.call < len(seq):
            call(j, now)
            return
        job.pos += 1
        if job.pos < len(job.requests):
            job.call, job.made = 0, [0] * len(fan)
            push(now + own_s, _CALL, j)
            return
        for r in job.requests:
            done[r] = per[0][1][r] = now
            if r >= skip and now - due[r] + overhead_s > bound:
                late += 1
        stations[0].free += 1
        dispatch(0, now)

    def dispatch(k: int, now: float) -> None:
        st = stations[k]
        while True:
            m = st.take(now)
            if m is None:
                if st.queue and st.free > 0 and st.plan[4] > 0 and st.timer != st.deadline():
                    st.timer = st.deadline()
                    push(st.timer, _TIMER, k)
                return
            batch = [st.queue.popleft()[1] for _ in range(m)]
            st.free -= 1
            if k == 0:
                jobs.append(_Job(batch, len(fan)))
                for r in batch:
                    per[0][0][r], per[0][2][r] = now, m
                if seq:
                    push(now + own_s, _CALL, len(jobs) - 1)
                else:
                    push(now + own_s * m, _DONE, 0, (m, [len(jobs) - 1]))
                continue
            who = [tokens[k].popleft() for _ in range(m)]
            s = tables[k][m]
            f = st.step.contention.shared_fraction
            if f > 0:
                start = max(now + (1 - f) * s, st.dev)
                end = st.dev = start + f * s
            else:
                end = now + s
            for idx in batch:
                per[k][1][idx], per[k][2][idx] = end, m
            push(end, _DONE, k, (m, who))

    tokens: list[deque[int]] = [deque() for _ in steps]  # the job behind each queued call
    while events:
        now, _, kind, a, b = heapq.heappop(events)
        if kind == _ARRIVE:
            stations[0].queue.append((now, a))
            dispatch(0, now)
        elif kind == _TIMER:
            dispatch(a, now)
        elif kind == _CALL:
            call(a, now)
        else:
            assert isinstance(b, tuple)
            if a == 0:  # a BLS model calling nothing: its requests' own parts done
                for j in b[1]:
                    jobs[j].call, jobs[j].pos = len(seq), len(jobs[j].requests) - 1
                    answered(j, now)
                continue
            stations[a].free += 1
            for j in b[1]:
                answered(j, now)
            dispatch(a, now)
        if late > allowed:
            return None
    return done, per

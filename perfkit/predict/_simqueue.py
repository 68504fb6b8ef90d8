"""The dynamic batcher under a queue policy (admission control): a bounded queue and queue
timeouts (model_config.proto ModelDynamicBatching.default_queue_policy). The rules it follows,
each from triton-inference-server/core:

1. No payload waits ahead. A default queue policy with a max_queue_size, a timeout or
   allow_timeout_override turns prefetching off (src/scheduler_utils.cc, PriorityQueue::PriorityQueue:
   support_prefetching_ only when all three are unset), and without prefetching a payload slot is
   free only while an instance waits for work (src/rate_limiter.cc, RateLimiter::PayloadSlotAvailable:
   WaitingConsumerCount > 0; src/dynamic_batch_scheduler.cc, WaitForPayloadSlotAvailable). So the
   batcher forms a batch only when an instance is idle, and the queue holds every request not yet
   executing: one instance and max_batch_size 1 make an M/D/1/K queue with K = max_queue_size + 1.
2. A full queue refuses the request: PolicyQueue::Enqueue returns UNAVAILABLE "Exceeds maximum
   queue size" when the queue already holds max_queue_size requests (0: no bound). Requests moved
   behind (DELAY) still count: PolicyQueue::Size() is queue_ plus delayed_queue_.
3. Each admitted request's deadline is its arrival plus default_timeout_microseconds (0: none;
   PolicyQueue::Enqueue). REJECT: a request still queued past its deadline is rejected, both when
   a batch is formed (PolicyQueue::ApplyPolicy) and while the batcher waits for an instance
   (WaitForPayloadSlotAvailable calls RejectTimeoutRequests each time its wait times out); it is
   answered with "Request timeout expired" (dynamic_batch_scheduler.cc). Taken here as rejected at
   its deadline.
4. DELAY: an expired request moves to the delayed queue (PolicyQueue::ApplyPolicy) and a batch
   takes the requests still in time first, then the delayed ones in the order they were moved
   (PolicyQueue::At indexes delayed_queue_ past queue_).
5. The batch an idle instance takes follows GetDynamicBatch with nothing pending (rule 4 of
   perfkit.predict._sim): with Q queued, B = max_batch_size, P the preferred sizes and D the
   queue delay: best = the largest preferred size within min(Q, B); best and the delay not
   exceeded: `best`; the delay exceeded, D = 0 or min(Q, B) >= max(P): min(Q, B); otherwise wait
   for the oldest request's delay or the next arrival.

Not followed: the batcher's wake-ups. On the server an instance's end notifies the batcher before
the instance counts itself a waiting consumer again (src/payload.cc Payload::Execute's callback,
src/rate_limiter.cc RateLimiter::DequeuePayload), so under a policy a queued request can wait for
the next arrival or the batcher's 500 ms poll (BatcherThread's default_wait_microseconds); an
arrival refused by a full queue wakes nothing. This loop hands an idle instance its batch at once:
it is the queueing model (M/D/1/K), not that stall (benchmarks/results/admission-2026-12-02.md).
Priorities (priority_levels) are not followed: every request is at the default level. The loop is
plain Python over one arrival list (a few microseconds a request): it predicts a config or checks
a closed form, not a whole space. What it adds to Triton's rules is _sim's: the execution time
(ServiceModel), the device shared by instances (Contention), the overhead outside the instance.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from perfkit.errors import UsageError
from perfkit.predict._model import BatcherConfig, Contention, Load, Prediction, ServiceModel
from perfkit.predict._sim import (
    WARMUP_FRACTION,
    _batch_plan,
    _percentiles,
    _service_array,
    through_request_path,
    unit_arrivals,
)

OUTCOME_SERVED = 0
OUTCOME_QUEUE_FULL = 1  # rule 2
OUTCOME_TIMED_OUT = 2  # rule 3 (REJECT)


def run_policy(
    arrivals_s: np.ndarray,
    *,
    max_batch_size: int,
    preferred: tuple[int, ...],
    delay_s: float,
    instances: int,
    table_s: np.ndarray,
    shared_fraction: float,
    max_queue_size: int,
    timeout_s: float,
    delay_expired: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each request's answer time (s), outcome (OUTCOME_*) and the size of the batch it ran in (0
    where rejected), for sorted arrival times (s). table_s: execution time by batch size 0..B;
    timeout_s 0: none; delay_expired: the timeout's action is DELAY (else REJECT)."""
    n = len(arrivals_s)
    arr = np.asarray(arrivals_s, dtype=np.float64)
    answer = np.zeros(n, dtype=np.float64)
    outcome = np.zeros(n, dtype=np.int64)
    batch_of = np.zeros(n, dtype=np.int64)
    big = max(1, max_batch_size)
    pref = tuple(sorted(p for p in preferred if p <= big)) or (big,)
    fresh: deque[int] = deque()  # admitted, in time, in arrival order
    late: deque[int] = deque()  # DELAY: expired, in the order they were moved
    free_at = [0.0] * instances
    busy = [False] * instances
    device = 0.0
    nxt = 0
    t = 0.0

    def expire(now: float) -> None:
        # Rule 3 / 4: the queue's oldest in-time requests whose deadline passed.
        while timeout_s > 0 and fresh and arr[fresh[0]] + timeout_s < now:
            i = fresh.popleft()
            if delay_expired:
                late.append(i)
            else:
                outcome[i] = OUTCOME_TIMED_OUT
                answer[i] = arr[i] + timeout_s

    while nxt < n or fresh or late:
        queued = len(fresh) + len(late)
        idle = [k for k in range(instances) if not busy[k] or free_at[k] <= t]
        for k in idle:
            busy[k] = False
        timer = np.inf
        if idle and queued:
            take = _batch(queued, big, pref, delay_s, t, arr[fresh[0]] if fresh else arr[late[0]])
            if take == 0:
                timer = (arr[fresh[0]] if fresh else arr[late[0]]) + delay_s
            else:
                members = [fresh.popleft() if fresh else late.popleft() for _ in range(take)]
                start = t
                run = table_s[take]
                if shared_fraction > 0:
                    start = max(t + (1 - shared_fraction) * run, device)
                    end = start + shared_fraction * run
                    device = end
                else:
                    end = t + run
                k = idle[0]
                busy[k], free_at[k] = True, end
                for i in members:
                    answer[i], batch_of[i] = end, take
                continue  # another idle instance may take the next batch at the same time
        # The next event: an arrival, an instance ending, the delay's timer, the queue head's deadline.
        t_arr = arr[nxt] if nxt < n else np.inf
        t_end = min((free_at[k] for k in range(instances) if busy[k]), default=np.inf)
        t_out = arr[fresh[0]] + timeout_s if timeout_s > 0 and fresh else np.inf
        t_next = min(t_arr, t_end, timer, t_out)
        if not np.isfinite(t_next):
            raise AssertionError("the queue-policy loop ran out of events with requests queued")
        t = max(t, t_next)
        if t_out <= t and t_out < t_arr:
            expire(np.nextafter(t, np.inf))
            continue
        expire(t)
        if t_arr <= t:
            i = nxt
            nxt += 1
            if max_queue_size > 0 and len(fresh) + len(late) >= max_queue_size:
                outcome[i] = OUTCOME_QUEUE_FULL  # rule 2
                answer[i] = arr[i]
            else:
                fresh.append(i)
    return answer, outcome, batch_of


def _batch(queued: int, big: int, pref: tuple[int, ...], delay_s: float, now: float, oldest_s: float) -> int:
    """Rule 5: how many queued requests an idle instance takes now (0: wait)."""
    scan = min(queued, big)
    best = max((p for p in pref if p <= scan), default=0)
    exceeded = delay_s > 0 and now >= oldest_s + delay_s
    if best and not exceeded:
        return best
    if exceeded or delay_s == 0 or scan >= pref[-1]:
        return scan
    return 0


def simulate_policy(
    cfg: BatcherConfig,
    service: ServiceModel,
    load: Load,
    contention: Contention,
    *,
    requests: int,
    seed: int,
    unit: np.ndarray | None,
) -> Prediction:
    """simulate() for a config with a queue policy (perfkit.predict._simqueue's rules): open loop
    only; the latencies and rates are the served requests', rejected_fraction the rest's share.
    Raises UsageError for a closed loop."""
    if load.kind == "concurrency":
        raise UsageError(
            "the simulator follows a queue policy in the open loop only",
            hint="predict a bounded queue at a request rate (N clients never queue more than N)",
        )
    if load.kind == "trace":
        due = np.sort(np.asarray(load.arrivals_s, dtype=float))
        due = due - due[0]
    else:
        due = (unit if unit is not None else unit_arrivals(load.kind, requests, seed)) / load.rate_rps
    served_at = through_request_path(due, service.host_us / 1e6)
    big, _pmin, _pmax, pref, delay = _batch_plan(cfg)
    answer, outcome, batch = run_policy(
        served_at, max_batch_size=big, preferred=tuple(pref), delay_s=delay, instances=cfg.instances,
        table_s=_service_array(service, big), shared_fraction=contention.shared_fraction,
        max_queue_size=cfg.max_queue_size, timeout_s=cfg.queue_timeout_us / 1e6,
        delay_expired=cfg.timeout_action == "delay",
    )  # fmt: skip
    skip = int(len(due) * WARMUP_FRACTION)
    ok = outcome[skip:] == OUTCOME_SERVED
    overhead_s = service.overhead_us / 1e6
    latency = (answer - due)[skip:][ok] + overhead_s
    kept = int(ok.sum())
    if kept == 0:
        raise UsageError("every simulated request was rejected", hint="a bigger max_queue_size or a lower rate")
    p50, p90, p95, p99 = _percentiles(latency)
    done = answer[skip:][ok]
    first, last = float(done.min()), float(done.max())
    span = last - first if last > first else 1e-9
    exec_s = _service_array(service, big)[batch[skip:][ok]]
    return Prediction(
        p50_us=float(p50) * 1e6,
        p90_us=float(p90) * 1e6,
        p95_us=float(p95) * 1e6,
        p99_us=float(p99) * 1e6,
        mean_us=float(latency.mean()) * 1e6,
        mean_wait_us=float((latency - exec_s - overhead_s).mean()) * 1e6,
        completed_rps=int(np.count_nonzero(done > first)) / span if last > first else 0.0,
        offered_rps=(len(due) - skip - 1) / (due[-1] - due[skip]) if due[-1] > due[skip] else math.inf,
        mean_batch=float(batch[skip:][ok].mean()),
        requests=kept,
        rejected_fraction=1.0 - kept / (len(due) - skip),
    )

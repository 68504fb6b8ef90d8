"""A discrete-event simulator of Triton's dynamic batcher and instance scheduling.

The rules it follows, each from triton-inference-server/core:

1. No dynamic batching: every request is its own execution, handed straight to the model's
   instances (src/dynamic_batch_scheduler.cc, DynamicBatchScheduler::Enqueue: "If not using
   dynamic batching, directly enqueue the request to model for execution"). Instances take the
   waiting executions in arrival order (src/rate_limiter.cc, RateLimiter::EnqueuePayload /
   DequeuePayload).
2. Preferred sizes default to max_batch_size (src/model_config_utils.cc, NormalizeModelConfig).
3. The batcher forms payloads ahead (DynamicBatchScheduler::BatcherThread,
   RateLimiter::PayloadSlotAvailable with the default queue policy's prefetching): while every
   instance is busy it forms the next payload, up to two an instance waiting, and keeps the
   latest one (curr_payload_) growable until an instance takes it:
   - an arrival wakes the batcher only while a payload slot is free and the queued requests
     reach next_preferred_batch_size_ (DynamicBatchScheduler::Enqueue); that size is set when
     the batcher waits for a preferred size and reset to 0 with each new payload (NewPayload);
   - woken, the batcher adds what is queued to the waiting payload while that payload's size is
     not a preferred one (GetDynamicBatch: "move the pending batch over"), so with a queue delay
     a formed payload stops growing once the batcher waits for a preferred size, and with no
     queue delay it grows with every arrival until it reaches the largest preferred size;
   - an instance takes the first waiting payload and, with a queue delay, merges the ones after
     it whose oldest request waited longer than the delay, up to max_batch_size
     (InstanceQueue::Dequeue); taking a payload or ending an execution wakes the batcher
     (Payload::Callback).
4. DynamicBatchScheduler::GetDynamicBatch, with Q requests queued, B = max_batch_size,
   P = the preferred sizes and D = max_queue_delay_microseconds:
   - the pending batch takes requests in order up to B;
   - best = the largest preferred size the pending batch passed (0 if none);
   - delay exceeded = D > 0 and the oldest request has waited at least D;
   - best != 0 and the delay not exceeded: send `best` requests now;
   - the delay exceeded, D = 0, or the pending batch reached max(P): send the pending batch
     (up to B);
   - otherwise wait until the delay of the oldest request runs out, or a request arrives that
     makes a preferred size (DynamicBatchScheduler::Enqueue wakes the batcher when the queued
     size reaches next_preferred_batch_size_).
5. An instance runs one execution at a time (one payload per instance,
   RateLimiter::DequeuePayload); a request completes when its execution does.

What it adds to Triton's rules: the execution time (ServiceModel), how instances share a device
(Contention: the shared part of each execution queues for one device, first come first served),
a fixed per-request overhead outside the instance, and in the open loop the request path's
ceiling (ServiceModel.host_us: requests pass one at a time before they reach the batcher, see
through_request_path); the batcher's own work takes no time, and
an instance ending takes the next waiting payload before the batcher, woken by the same ending,
can grow it. The open-loop event loop exists twice, forming the same batches: _reference.py (the
rules as read, objects and a heap of events) and _simloop.run_open (compiled by numba, what
_run_open and so scoring a space run). The closed loop (_run_closed, concurrency loads:
perf_analyzer's concurrency mode, each client sending its next request when its last is answered,
docs/perf_analyzer.md "Concurrency Mode" in triton-inference-server/perf_analyzer) runs the same
compiled loop, writing each answer's next arrival as its batch is handed out. departures()
gives each request's answer and batch size from the compiled loop: each step of a pipeline
(perfkit.predict._pipeline) runs through it, so the rules are written here only.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from perfkit.errors import UsageError
from perfkit.predict._model import BatcherConfig, Contention, Load, Prediction, ServiceModel
from perfkit.predict._reference import Reference

# The p99 of 10k simulated requests moves the M/D/1 sustainable rate by about 5% from seed to
# seed (4k: 9%, 50k: 2.5%); batched configs, whose executions hold many requests, by less.
DEFAULT_REQUESTS = 10_000
WARMUP_FRACTION = 0.1
LOOPS = ("compiled", "reference")


def unit_arrivals(kind: str, requests: int, seed: int = 0) -> np.ndarray:
    """Arrival times at rate 1 (s): divide by a rate to get that rate's arrivals. The same unit
    arrivals at every rate (common random numbers) keep a bisection on the rate monotone."""
    if kind == "constant":
        return np.arange(requests, dtype=float)
    if kind != "poisson":
        raise UsageError(f"unit arrivals for load kind {kind!r}", hint="use poisson or constant")
    gaps = np.random.default_rng(seed).exponential(1.0, size=requests)
    return np.cumsum(gaps) - gaps[0]


def through_request_path(due: np.ndarray, host_s: float) -> np.ndarray:
    """When each request of a sorted arrival list (s) leaves the request path, one request at a time
    host_s each, first come first served (ServiceModel.host_us), counted as the time it could
    have left with no service there: max(due_i, left_{i-1} + host_s), Lindley's recursion,
    computed as host_s * i + the running maximum of (due_j - host_s * j). A request alone on the
    path leaves at its due time (its handling is in the overhead); one behind others waits."""
    if host_s <= 0 or len(due) == 0:
        return due
    step = host_s * np.arange(len(due), dtype=np.float64)
    return step + np.maximum.accumulate(due - step)


def _service_table(service: ServiceModel, largest: int) -> list[float]:
    """Execution time (s) by batch size 0..largest."""
    return list(_service_array(service, largest).tolist())


@functools.lru_cache(maxsize=256)
def _service_array(service: ServiceModel, largest: int) -> np.ndarray:
    """_service_table as a read-only array, kept: a space's configs share a few service models."""
    table = np.array([0.0] + [service.service_us(n) / 1e6 for n in range(1, largest + 1)], dtype=np.float64)
    table.flags.writeable = False
    return table


def _batch_plan(cfg: BatcherConfig) -> tuple[int, int, int, list[int], float]:
    """(B, smallest preferred, largest preferred, preferred sizes, delay in s) for GetDynamicBatch."""
    if not cfg.batching:
        return 1, 1, 1, [1], 0.0
    pref = list(cfg.preferred())
    return cfg.max_batch_size, pref[0], pref[-1], pref, cfg.max_queue_delay_us / 1e6


_KEPT_PERCENTILES = np.array([50.0, 90.0, 95.0, 99.0]) / 100


def _percentiles(x: np.ndarray) -> np.ndarray:
    """np.percentile(x, [50, 90, 95, 99]) (its default, linear interpolation) from one partial
    sort at the ranks needed: np.percentile's own bookkeeping costs more than the sort here."""
    n = len(x)
    rank = _KEPT_PERCENTILES * (n - 1)
    lo = np.floor(rank).astype(np.intp)
    hi = np.minimum(lo + 1, n - 1)
    part = np.partition(x, np.union1d(lo, hi))
    a, b, t = part[lo], part[hi], rank - lo
    return np.where(t >= 0.5, b - (b - a) * (1 - t), a + (b - a) * t)


def _run_open(
    due: np.ndarray | list[float],
    cfg: BatcherConfig,
    service: ServiceModel,
    contention: Contention,
    give_up: tuple[float, int, int] | None = None,
) -> tuple[np.ndarray, np.ndarray] | None:
    """Dispatch every request of a known, sorted arrival list (s); returns each batch's size and
    end (s), as arrays. give_up = (latency bound s, first counted request, how many may exceed it):
    None as soon as more requests than that exceed the bound (the percentile is then past it,
    whatever follows). Runs the compiled loop (_simloop.run_open), which must agree with
    _run_open_reference batch for batch; the first call in a process imports numba."""
    arr = np.ascontiguousarray(due, dtype=np.float64)
    if len(arr) == 0:  # no request, no batch (the loop reads the first arrival)
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
    return _run_loop(arr, cfg, service, contention, give_up, clients=0, gap_s=0.0)


def _run_closed(
    clients: int,
    requests: int,
    cfg: BatcherConfig,
    service: ServiceModel,
    contention: Contention,
    give_up: tuple[float, int, int] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Closed loop (perf_analyzer's concurrency mode: each of `clients` clients sends its next
    request as soon as its last is answered): every client sends at 0, and each answer's next
    request reaches the batcher overhead_us after its batch ends (the way back to the client and
    out again: the overhead outside the instance). The batches are the open loop's, Triton's
    rules on the arrivals the answers make (the same compiled loop, _simloop.run_open with
    clients). Returns every request's arrival (s, sorted) and each batch's size and end (s), or
    None where give_up (as _run_open's) cut it short. The request path's ceiling
    (ServiceModel.host_us) is not queued here: N clients hold at most N requests in flight, and
    the callers bound the rate by it (ceiling_rps)."""
    arr = np.zeros(requests, dtype=np.float64)
    run = _run_loop(arr, cfg, service, contention, give_up, clients=clients, gap_s=service.overhead_us / 1e6)
    if run is None:
        return None
    return arr, run[0], run[1]


def _run_loop(
    arr: np.ndarray,
    cfg: BatcherConfig,
    service: ServiceModel,
    contention: Contention,
    give_up: tuple[float, int, int] | None,
    *,
    clients: int,
    gap_s: float,
) -> tuple[np.ndarray, np.ndarray] | None:
    """The compiled loop on arr (see _simloop.run_open: the open loop with clients 0, else a
    closed loop writing the arrivals into arr); each batch's size and end, None where cut short."""
    run_open = _compiled_loop()
    big, _pmin, _pmax, pref, delay = _batch_plan(cfg)
    sizes = np.empty(len(arr), dtype=np.int64)
    ends = np.empty(len(arr), dtype=np.float64)
    bound, counted_from, allowed = give_up if give_up is not None else (math.inf, 0, 0)
    batches = run_open(
        arr, np.asarray(pref, dtype=np.int64), _service_array(service, big),
        sizes, ends, cfg.instances, big, delay, contention.shared_fraction, bound, counted_from, allowed,
        clients, gap_s,
    )  # fmt: skip
    if batches == -2:
        raise AssertionError("the simulator's event loop ran out of events before every request ran")
    if batches < 0:
        return None
    return sizes[:batches], ends[:batches]


def _give_up(
    requests: int, budget_us: float | None, percentile: float, overhead_s: float
) -> tuple[float, int, int] | None:
    """The loop's give-up bound for a budget (see _run_open): the budget less the overhead, over
    the requests after the warm-up, as many past it as the percentile allows; None without one."""
    if budget_us is None:
        return None
    skip = int(requests * WARMUP_FRACTION)
    return budget_us / 1e6 - overhead_s, skip, int((requests - skip) * (1 - percentile / 100.0))


def departures(
    cfg: BatcherConfig, service: ServiceModel, arrivals_s: np.ndarray, contention: Contention
) -> tuple[np.ndarray, np.ndarray]:
    """Each request's answer time (s) and the size of the batch it ran in (int64), in the order of
    arrivals_s (arrival times, s, any order; requests arriving together are served in the order
    given): the batches of the compiled loop (_run_open), first come first served. The service's
    overhead_us is not added. Raises UsageError as _run_open (numba missing)."""
    arrivals = np.asarray(arrivals_s, dtype=np.float64)
    if arrivals.ndim != 1:
        raise UsageError(f"arrival times of shape {arrivals.shape}", hint="give a flat array of times in s")
    order = np.argsort(arrivals, kind="stable")
    run = _run_open(arrivals[order], cfg, service, contention)
    assert run is not None  # no give_up: never cut short
    sizes, ends = run
    answer = np.empty(len(arrivals), dtype=np.float64)
    batch = np.empty(len(arrivals), dtype=np.int64)
    answer[order] = np.repeat(ends, sizes)
    batch[order] = np.repeat(sizes, sizes)
    return answer, batch


@functools.cache
def _compiled_loop() -> Callable[..., int]:
    """_simloop.run_open, imported on first use: importing numba costs ~0.7 s, which no command
    that never simulates should pay. Raises UsageError where numba is missing (a broken install:
    perfkit depends on it)."""
    try:
        from perfkit.predict import _simloop
    except ImportError as err:
        raise UsageError(
            f"the batcher simulator needs numba, which did not import ({err})",
            hint="reinstall perfkit (pip install perfkit): numba is one of its dependencies",
        ) from None
    return _simloop.run_open


def _run_open_reference(
    arr: list[float],
    cfg: BatcherConfig,
    service: ServiceModel,
    contention: Contention,
    give_up: tuple[float, int, int] | None = None,
) -> tuple[list[int], list[float]] | None:
    """_run_open as the rules read (_reference.py): the loop the fast one is held to."""
    big, _pmin, _pmax, pref, delay = _batch_plan(cfg)
    table = _service_table(service, big)
    bounds = give_up if give_up is not None else (math.inf, 0, 0)
    return Reference(list(arr), big, pref, delay, cfg.instances, table, contention.shared_fraction, bounds).run()


def simulate(
    cfg: BatcherConfig,
    service: ServiceModel,
    load: Load,
    contention: Contention | None = None,
    *,
    requests: int = DEFAULT_REQUESTS,
    seed: int = 0,
    unit: np.ndarray | None = None,
    loop: str = "compiled",
) -> Prediction:
    """Run `requests` requests of `load` through the batcher and instances of `cfg`; latency is
    counted from each request's due time to its answer (plus the service's overhead), over the
    requests after the first WARMUP_FRACTION. `unit` reuses rate-1 arrivals (see unit_arrivals);
    `loop` picks the event loop (see simulate_within). Raises UsageError for a load or config the
    simulator cannot run."""
    p = simulate_within(cfg, service, load, contention, requests=requests, seed=seed, unit=unit, loop=loop)
    assert p is not None  # no budget given: never cut short
    return p


def simulate_within(
    cfg: BatcherConfig,
    service: ServiceModel,
    load: Load,
    contention: Contention | None = None,
    *,
    requests: int = DEFAULT_REQUESTS,
    seed: int = 0,
    unit: np.ndarray | None = None,
    budget_us: float | None = None,
    percentile: float = 99.0,
    loop: str = "compiled",
) -> Prediction | None:
    """simulate(), cut short (None) once more requests than the percentile allows exceed
    budget_us: its percentile would be past the budget.
    loop: which open-loop event loop runs, both giving the same batches: "compiled" (numba's, see
    _simloop) or "reference" (in Python, the rules one call a batch, ~50x slower). Raises
    UsageError for an unknown loop. With the response cache on: predict/_sim_cache.py."""
    if loop not in LOOPS:
        raise UsageError(f"simulator loop {loop!r} unknown", hint=f"use one of {', '.join(LOOPS)}")
    contention = contention or Contention()
    if cfg.batching and any(n < 1 for n in (cfg.max_batch_size,)):
        raise UsageError(f"max_batch_size={cfg.max_batch_size}: must be >= 1", hint="give 1 or more")
    overhead_s = service.overhead_us / 1e6
    sizes: list[int] | np.ndarray
    ends: list[float] | np.ndarray
    if cfg.queue_policy:
        # imported here: _simqueue builds on this module's arrivals, request path and batch plan
        from perfkit.predict._simqueue import simulate_policy

        return simulate_policy(cfg, service, load, contention, requests=requests, seed=seed, unit=unit)
    if load.kind == "concurrency":
        closed = _run_closed(load.concurrency, requests, cfg, service, contention,
                             _give_up(requests, budget_us, percentile, overhead_s))  # fmt: skip
        if closed is None:
            return None
        due, sizes, ends = closed
    else:
        if load.kind == "trace":
            due = np.sort(np.asarray(load.arrivals_s, dtype=float))
            due = due - due[0]
        else:
            base = unit if unit is not None else unit_arrivals(load.kind, requests, seed)
            due = base / load.rate_rps
        served = through_request_path(due, service.host_us / 1e6)
        give_up = _give_up(len(due), budget_us, percentile, overhead_s)
        # The batcher sees each request when the request path lets it through (served); its latency
        # counts from its due time, so the wait on that path is in it. The give-up bound, on the
        # time from served to answer, is then never past the latency it stands for.
        run = (
            _run_open(served, cfg, service, contention, give_up)
            if loop == "compiled"
            else _run_open_reference(served.tolist(), cfg, service, contention, give_up)
        )
        if run is None:
            return None
        sizes, ends = run
    batch = np.asarray(sizes, dtype=np.int64)
    return prediction_of(due, np.repeat(np.asarray(ends), batch), batch, service)


def prediction_of(
    due: np.ndarray, done: np.ndarray, batch: np.ndarray, service: ServiceModel, exec_s: np.ndarray | None = None
) -> Prediction:
    """The figures of a run: each request's due time and answer (s), the batches' sizes; `exec_s`,
    each request's execution (s, default: its batch's)."""
    overhead_s = service.overhead_us / 1e6
    latency = done - due + overhead_s
    skip = int(len(latency) * WARMUP_FRACTION)
    kept = latency[skip:]
    p50, p90, p95, p99 = _percentiles(kept)
    count = len(kept)
    # Rates over the kept requests: completions from the first kept one's answer to the last's.
    first, last = float(done[skip:].min()), float(done[skip:].max())
    span = last - first if last > first else 1e-9
    offered = (count - 1) / (due[-1] - due[skip]) if due[-1] > due[skip] else math.inf
    if exec_s is None:
        exec_s = np.repeat(_service_array(service, int(batch.max()))[batch], batch)
    exec_s = exec_s[skip:]
    return Prediction(
        p50_us=float(p50) * 1e6,
        p90_us=float(p90) * 1e6,
        p95_us=float(p95) * 1e6,
        p99_us=float(p99) * 1e6,
        mean_us=float(np.add.reduce(kept)) / count * 1e6,
        mean_wait_us=float(np.add.reduce(kept - exec_s - overhead_s)) / count * 1e6,
        completed_rps=int(np.count_nonzero(done[skip:] > first)) / span if last > first else 0.0,
        offered_rps=offered,
        mean_batch=float(np.add.reduce(batch)) / len(batch),
        requests=count,
    )

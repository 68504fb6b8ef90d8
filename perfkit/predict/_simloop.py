"""The batcher simulator's open-loop event loop, compiled by numba: the rules of _sim's module
docstring (each cited there from triton-inference-server/core), event for event and in the same
floating-point operations as the reference loop (_reference.py), so that both give the same
batches and ends. Scoring a space runs this loop tens of millions of times; in Python it is ~0.5 us a batch.

numba, not hand-written C (the project's rule: a well-kept library before code of its own; the
load generator's hot path is the one place for hand-tuned code). Importing this module imports
numba (0.2-0.7 s) and loads the loop's machine code from numba's cache (0.1-0.3 s): NUMBA_CACHE_DIR
where set, else __pycache__ beside this file, else numba's user-wide cache directory
(~/.cache/numba); the first process on a machine compiles it (1-3 s) and writes the cache (files
written whole and renamed into place: processes started together each compile or load, none
fails). Where no cache directory is writable, each process compiles it for itself. _sim imports
this module on the first simulation only, so commands that never simulate never pay for numba.
Without fastmath numba emits no fused multiply-add, so the doubles are Python's.
NUMBA_DISABLE_JIT=1 runs the same function as plain Python.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numba
import numpy as np
from numba import types

_log = logging.getLogger(__name__)

_F64 = types.Array(types.float64, 1, "C")
_I64 = types.Array(types.int64, 1, "C")
_TABLE = types.Array(types.float64, 1, "C", readonly=True)  # _sim._service_array's kept, read-only tables
# One signature, compiled (or loaded from the cache) when this module is imported: no dispatch on
# argument types, and no second compile for another array layout.
_SIGNATURE = types.int64(
    _F64, _I64, _TABLE, _I64, _F64, types.int64, types.int64, types.float64, types.float64, types.float64,
    types.int64, types.int64, types.int64, types.float64,
)  # fmt: skip


@numba.njit(nogil=True)
def _right_of(a: np.ndarray, x: float, lo: int, hi: int) -> int:
    """bisect.bisect_right(a, x, lo, hi)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if x < a[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


@numba.njit(nogil=True)
def _left_of(a: np.ndarray, x: float, lo: int, hi: int) -> int:
    """bisect.bisect_left(a, x, lo, hi)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _run_open(
    arr: np.ndarray,
    pref: np.ndarray,
    table: np.ndarray,
    sizes: np.ndarray,
    ends: np.ndarray,
    instances: int,
    big: int,
    delay: float,
    f: float,
    bound: float,
    counted_from: int,
    allowed: int,
    clients: int,
    gap: float,
) -> int:
    """Dispatch every request of `arr` (arrival times, s, sorted) to `instances` instances; write
    each batch's size and end (s) to sizes and ends (len(arr) long at least) and return how many
    batches there were, or -1 once more than `allowed` requests from `counted_from` on took longer
    than `bound` (s): the percentile is past it, whatever follows. pref: the preferred sizes,
    rising within 1..big (one of them, big, when there is none); table: execution time (s) by batch
    size 0..big; f: the shared fraction of an execution (Contention). The events, the batcher's
    passes and the instances' takes of _reference.Reference, in the same order.

    clients > 0: a closed loop of that many clients (perf_analyzer's concurrency mode), arr the
    room for every request's arrival: the first `clients` are given (arr[:clients], sorted), and
    each request answered sends its client's next request `gap` s after its batch ends (_issue),
    written into arr in arrival order as the batch is handed out (its end is known then, and
    later than any event so far, so every arrival before the loop's time is written before it is
    read). arr then holds every request's arrival time."""
    n = arr.shape[0]
    if n == 0:
        return 0
    known = n if clients <= 0 else min(clients, n)
    if big == 1:  # rule 1: a payload a request, no batcher to wait for
        return _run_unbatched(arr, table, sizes, ends, instances, f, bound, counted_from, allowed, known, gap)
    npref = pref.shape[0]
    pmax = pref[npref - 1]
    inf = np.inf
    dev = 0.0
    over = 0
    batches = 0
    done = 0
    # The scheduler's queue: requests head..arrived-1.
    head = 0
    arrived = 0
    # The batcher: the current payload (the last waiting one, while cur_in), NewPayload pending,
    # next_preferred_batch_size_, its timer.
    cur_in = False
    renew = False
    next_pref = 0
    timer = inf
    # Waiting payloads (a ring of 2 an instance) and the instances' ends (busy while >= 0 flag).
    slots = 2 * instances
    wfirst = np.zeros(slots, dtype=np.int64)
    wsize = np.zeros(slots, dtype=np.int64)
    whead = 0
    wcount = 0
    busy = np.zeros(instances, dtype=np.bool_)
    until = np.zeros(instances, dtype=np.float64)
    while done < n:
        # The next event: an instance ending, then an arrival, then the timer.
        ie = -1
        t_end = inf
        for i in range(instances):
            if busy[i] and until[i] < t_end:
                t_end = until[i]
                ie = i
        t_arr = arr[arrived] if arrived < known else inf
        if ie >= 0 and t_end <= t_arr and t_end <= timer:
            t = t_end
            busy[ie] = False
            wake = True
        elif arrived < known and t_arr <= timer:
            t = t_arr
            arrived += 1
            wake = wcount < slots and (renew or arrived - head >= next_pref)
        elif timer < inf:
            t = timer
            wake = True
        else:  # nothing can happen: a bug, not a result
            return -2
        while True:
            # Idle instances take waiting payloads (InstanceQueue::Dequeue, merging).
            for i in range(instances):
                if busy[i] or wcount == 0:
                    continue
                first = wfirst[whead]
                m = wsize[whead]
                whead = (whead + 1) % slots
                wcount -= 1
                if delay > 0:
                    while wcount > 0:
                        nf = wfirst[whead]
                        ns = wsize[whead]
                        if not (t > arr[nf] + delay and m + ns <= big):
                            break
                        m += ns
                        whead = (whead + 1) % slots
                        wcount -= 1
                if cur_in and wcount == 0:
                    cur_in = False
                    renew = True
                end = _end_of(t, table[m], f, dev)
                if f > 0:
                    dev = end
                busy[i] = True
                until[i] = end
                sizes[batches] = m
                ends[batches] = end
                batches += 1
                done += m
                if known < n:
                    known = _issue(arr, known, end + gap, m)
                if end - arr[first] > bound and first >= counted_from:
                    over += _left_of(arr, end - bound, first, first + m) - first
                wake = True
            if over > allowed:
                return -1
            if not wake:
                break
            # One pass of the batcher's loop (BatcherThread, GetDynamicBatch).
            wake = False
            if renew:
                cur_in = False
                renew = False
                next_pref = 0
            queued = arrived - head
            timer = inf
            if queued == 0 or wcount >= slots:
                continue
            p_size = wsize[(whead + wcount - 1) % slots] if cur_in else 0
            room = big - p_size
            scan = queued if queued < room else room
            best = 0
            for j in range(npref):
                k = pref[j] - p_size
                if k >= 1 and k <= scan:
                    best = k
            exceeded = delay > 0 and t >= arr[head] + delay
            saturated = False
            if best > 0 and not exceeded:
                take = best
                saturated = delay == 0
            elif queued > room or p_size + scan >= pmax:
                take = scan
                saturated = True
            elif exceeded or delay == 0:
                take = scan
            else:
                for j in range(npref):
                    if pref[j] > p_size + scan:
                        next_pref = pref[j] - p_size
                        break
                if p_size != 0 and not _has(pref, p_size):
                    take = scan
                else:
                    timer = arr[head] + delay
                    continue
            if cur_in:
                wsize[(whead + wcount - 1) % slots] += take
            else:
                w = (whead + wcount) % slots
                wfirst[w] = head
                wsize[w] = take
                wcount += 1
                cur_in = True
            head += take
            renew = renew or saturated
            wake = True
    return batches


@numba.njit(nogil=True)
def _issue(arr: np.ndarray, known: int, at: float, m: int) -> int:
    """Write m arrivals at time `at` into the sorted arr[:known], after those at or before it (the
    later ones move up), at most up to len(arr); returns how many are written now. The closed
    loop's next requests: `at` is past every arrival read, so none read moves."""
    k = min(m, arr.shape[0] - known)
    if k <= 0:
        return known
    pos = _right_of(arr, at, 0, known)
    for j in range(known - 1, pos - 1, -1):
        arr[j + k] = arr[j]
    for j in range(pos, pos + k):
        arr[j] = at
    return known + k


@numba.njit(nogil=True)
def _end_of(t: float, s: float, f: float, dev: float) -> float:
    """When an execution of s seconds handed to an instance at t ends: its own part (1 - f) first,
    then its shared part f once the device is free (dev, Contention), in the reference loop's
    floating-point operations."""
    if f > 0:
        start = t + (1 - f) * s
        if dev > start:  # noqa: PLR1730 - the same comparison as the reference loop's max()
            start = dev
        return start + f * s
    return t + s


@numba.njit(nogil=True)
def _has(pref: np.ndarray, size: int) -> bool:
    """size in pref (a loop: numba compiles no generator in any())."""
    for p in pref:  # noqa: SIM110 - any() over a generator does not compile under numba
        if p == size:
            return True
    return False


@numba.njit(nogil=True)
def _run_unbatched(
    arr: np.ndarray,
    table: np.ndarray,
    sizes: np.ndarray,
    ends: np.ndarray,
    instances: int,
    f: float,
    bound: float,
    counted_from: int,
    allowed: int,
    known: int,
    gap: float,
) -> int:
    """Rule 1: each request its own execution, taken in arrival order by the instance free first
    (the same batches as the event loop, which a payload a request makes a plain queue). known <
    len(arr): a closed loop, as _run_open's (each answer's next request written by _issue; request
    h's arrival is written before h is taken, its client's earlier request answered by then)."""
    n = arr.shape[0]
    dev = 0.0
    over = 0
    s = table[1]
    free_at = np.full(instances, arr[0])
    for h in range(n):
        first = 0
        for i in range(1, instances):
            if free_at[i] < free_at[first]:
                first = i
        t = free_at[first] if free_at[first] > arr[h] else arr[h]
        end = _end_of(t, s, f, dev)
        if f > 0:
            dev = end
        free_at[first] = end
        sizes[h] = 1
        ends[h] = end
        if known < n:
            known = _issue(arr, known, end + gap, 1)
        if end - arr[h] > bound and h >= counted_from:
            over += 1
            if over > allowed:
                return -1
    return n


def _compiled(func: Callable[..., int]) -> Callable[..., int]:
    """func compiled for _SIGNATURE, from or into numba's cache where a cache directory is
    writable, else for this process only (numba refuses cache=True with no writable directory)."""
    try:
        return numba.njit(_SIGNATURE, cache=True, nogil=True)(func)
    except RuntimeError as err:
        if "cannot cache" not in str(err):
            raise
        _log.warning("the simulator's loop is compiled for this process only: %s (set NUMBA_CACHE_DIR to a"
                     " writable directory to compile it once)", err)  # fmt: skip
        return numba.njit(_SIGNATURE, nogil=True)(func)


run_open = _compiled(_run_open)

"""The batcher simulator's open-loop event loop, compiled by numba: the rules of _sim's module
docstring (each cited there from triton-inference-server/core), step for step and in the same
floating-point operations as _sim._run_open_reference, so that both give the same batches and
ends. Scoring a space runs this loop tens of millions of times; in Python it is ~0.5 us a batch.

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
    types.int64, types.int64,
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
) -> int:
    """Dispatch every request of `arr` (arrival times, s, sorted) to `instances` instances; write
    each batch's size and end (s) to sizes and ends (len(arr) long at least) and return how many
    batches there were, or -1 once more than `allowed` requests from `counted_from` on took longer
    than `bound` (s): the percentile is past it, whatever follows. pref: the preferred sizes,
    rising within 1..big (one of them, big, when there is none); table: execution time (s) by batch
    size 0..big; f: the shared fraction of an execution (Contention)."""
    n = arr.shape[0]
    npref = pref.shape[0]
    g = 1 - f
    dev = 0.0
    pmin = pref[0]
    single = npref == 1
    over = 0
    h = 0
    batches = 0
    free_at = np.full(instances, arr[0])
    while h < n:
        # The instance free first (heapq's smallest; which of equal ones does not matter).
        first = 0
        for i in range(1, instances):
            if free_at[i] < free_at[first]:
                first = i
        tf = free_at[first]
        a_h = arr[h]
        td = tf if tf > a_h else a_h
        if big == 1:  # each request its own execution (rule 1): no batch to form
            m = 1
        else:
            # Requests queued at td, counted up to max_batch_size only: the batch never holds more.
            top = h + big if h + big < n else n
            queued = _right_of(arr, td, h, top) - h
            deadline = a_h + delay
            exceeded = delay > 0 and td >= deadline
            if delay > 0 and not exceeded and queued < pmin:
                # Wait for the request that makes the smallest preferred size, or the delay.
                k = h + pmin - 1
                if k < n and arr[k] < deadline:
                    td = arr[k]
                else:
                    td = deadline
                    exceeded = True
                queued = _right_of(arr, td, h, top) - h
            m = queued  # the delay ran out, no delay, or nothing preferred reached: what is pending
            if not exceeded and queued >= pmin:
                m = pmin if single else pref[_right_of(pref, queued, 0, npref) - 1]
        s = table[m]
        if f > 0:
            start = td + g * s
            if dev > start:  # noqa: PLR1730 - the same comparison as the reference loop's max()
                start = dev
            end = start + f * s
            dev = end
        else:
            end = td + s
        free_at[first] = end
        sizes[batches] = m
        ends[batches] = end
        batches += 1
        if end - a_h > bound and h >= counted_from:
            over += _left_of(arr, end - bound, h, h + m) - h
            if over > allowed:
                return -1
        h += m
    return batches


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

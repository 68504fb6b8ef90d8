"""When each request is due: pure pacers, testable without sleeping.

A pacer maps the index of a request to its due time (ns after the level's start),
like vegeta's pacer maps (elapsed, hits) to the next hit. Sends are scheduled on
these due times; how late they actually went out is measured, never hidden.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from perfkit.errors import InputError, UsageError
from perfkit.records import LoadLevel

NS_PER_S = 1_000_000_000


def constant_due_ns(rate_rps: float, *, worker: int = 0, workers: int = 1) -> Iterator[int]:
    """Due times of a constant rate, the share of one worker out of `workers` (interleaved)."""
    if rate_rps <= 0:
        raise ValueError("rate must be positive")
    period_ns = NS_PER_S / rate_rps
    for i in itertools.count(worker, workers):
        yield int(i * period_ns)


def poisson_due_ns(rate_rps: float, *, seed: int, worker: int = 0, workers: int = 1) -> Iterator[int]:
    """Due times of a Poisson process; W workers each at rate/W superpose to exactly rate."""
    if rate_rps <= 0:
        raise ValueError("rate must be positive")
    rng = np.random.default_rng([seed, worker])
    mean_gap_ns = NS_PER_S * workers / rate_rps
    t = 0.0
    while True:
        gaps = rng.exponential(mean_gap_ns, 4096)
        for gap in gaps.tolist():
            t += gap
            yield int(t)


def onoff_due_ns(rate_rps: float, on_ms: float, off_ms: float, *, worker: int = 0, workers: int = 1) -> Iterator[int]:
    """Due times of on/off bursts: evenly spaced sends while on, none while off, repeating.

    `rate_rps` is the mean rate over a whole cycle, so a level's value means the same as a
    constant level's: while on, requests go out at rate * (on + off) / on. Request i is due
    at its place in "on time" (i / on_rate) mapped onto the cycle: the number of whole on
    windows before it times the cycle, plus its offset in its window.
    """
    if rate_rps <= 0:
        raise ValueError("rate must be positive")
    if on_ms <= 0 or off_ms < 0:
        raise ValueError("bursts need on_ms > 0 and off_ms >= 0")
    on_ns = on_ms * 1e6
    cycle_ns = on_ns + off_ms * 1e6
    on_period_ns = NS_PER_S * on_ns / (rate_rps * cycle_ns)
    for i in itertools.count(worker, workers):
        on_time_ns = i * on_period_ns
        cycles, offset_ns = divmod(on_time_ns, on_ns)
        yield int(cycles * cycle_ns + offset_ns)


def check_bursts(distribution: str, on_ms: float | None, off_ms: float | None, *, flag: str) -> None:
    """--burst-on-ms/--burst-off-ms go with onoff arrivals only, on > 0 and off >= 0; raises UsageError."""
    given = [n for n, v in (("--burst-on-ms", on_ms), ("--burst-off-ms", off_ms)) if v is not None]
    if given and distribution != "onoff":
        raise UsageError(f"{given[0]}: only with {flag} onoff (bursts of sends, then none)")
    if on_ms is not None and on_ms <= 0:
        raise UsageError(f"--burst-on-ms {on_ms:g}: a burst must last more than 0 ms")
    if off_ms is not None and off_ms < 0:
        raise UsageError(f"--burst-off-ms {off_ms:g}: the gap between bursts cannot be negative")


def intervals_due_ns(intervals_ns: Sequence[int], *, worker: int = 0, workers: int = 1) -> Iterator[int]:
    """Due times from a repeating list of gaps (perf_analyzer's --request-intervals)."""
    if not intervals_ns or any(g < 0 for g in intervals_ns):
        raise ValueError("intervals must be a non-empty list of non-negative gaps")
    t = 0
    for i, gap in enumerate(itertools.cycle(intervals_ns)):
        t += gap
        if i % workers == worker:
            yield t


def read_intervals_file(path: str | Path) -> list[int]:
    """Read perf_analyzer's intervals file (one gap in microseconds per line) as ns; raises InputError."""
    p = Path(path)
    try:
        lines = p.read_text().split()
    except OSError as err:
        raise InputError(f"--request-intervals {p}: cannot read ({err.strerror})") from None
    gaps = []
    for n, tok in enumerate(lines, 1):
        try:
            value = float(tok)
        except ValueError:
            raise InputError(f"--request-intervals {p}: entry {n} {tok!r} is not a number of microseconds") from None
        if value < 0:
            raise InputError(f"--request-intervals {p}: entry {n} is negative")
        gaps.append(int(value * 1000))
    if not gaps:
        raise InputError(f"--request-intervals {p}: the file holds no intervals")
    return gaps


def due_times(
    level: LoadLevel, *, seed: int = 0, worker: int = 0, workers: int = 1, intervals_ns: Sequence[int] = ()
) -> Iterator[int]:
    """The due-time iterator (ns from start) for an open-loop level; raises ValueError for closed loop."""
    if level.mode == "request_rate":
        if level.distribution == "poisson":
            return poisson_due_ns(level.value, seed=seed, worker=worker, workers=workers)
        if level.distribution == "onoff":
            on_ms, off_ms = level.bursts_ms
            return onoff_due_ns(level.value, on_ms, off_ms, worker=worker, workers=workers)
        return constant_due_ns(level.value, worker=worker, workers=workers)
    if level.mode == "custom_intervals":
        return intervals_due_ns(intervals_ns, worker=worker, workers=workers)
    raise ValueError(f"{level.mode} is a closed loop: it has no due times")


def split_concurrency(concurrency: int, workers: int) -> list[int]:
    """Share N connections among workers as evenly as possible (drops empty shares)."""
    base, extra = divmod(concurrency, workers)
    return [base + (1 if i < extra else 0) for i in range(workers) if base + (1 if i < extra else 0) > 0]

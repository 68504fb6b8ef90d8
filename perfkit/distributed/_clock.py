"""A worker's clock offset to the coordinator: round trips, minimum filter (as NTP/Cristian).

For each round trip the coordinator notes its clock before (t1) and after (t2) asking the
worker for its clock (w); if the two legs took equal time, w was read at (t1 + t2) / 2. The
round trip with the smallest t2 - t1 bounds that assumption best: its offset is kept, and half
its round trip is the offset's uncertainty (the true offset lies within +- that).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter_ns

ROUND_TRIPS = 15


@dataclass(frozen=True)
class ClockOffset:
    """Worker clock minus coordinator clock (ns), and the half-width it is known within."""

    offset_ns: int
    uncertainty_ns: int
    round_trips: int

    def to_worker(self, coordinator_ns: int) -> int:
        """A coordinator time on the worker's clock."""
        return coordinator_ns + self.offset_ns


def measure_offset(
    read_remote_ns: Callable[[], int], *, round_trips: int = ROUND_TRIPS, clock: Callable[[], int] = perf_counter_ns
) -> ClockOffset:
    """Estimate a remote clock's offset from round trips, keeping the fastest; raises ValueError if round_trips < 1."""
    if round_trips < 1:
        raise ValueError("round_trips must be at least 1")
    best: tuple[int, int] | None = None  # (rtt, offset)
    for _ in range(round_trips):
        t1 = clock()
        remote = read_remote_ns()
        t2 = clock()
        rtt = t2 - t1
        offset = remote - (t1 + t2) // 2
        if best is None or rtt < best[0]:
            best = (rtt, offset)
    assert best is not None
    return ClockOffset(offset_ns=best[1], uncertainty_ns=(best[0] + 1) // 2, round_trips=round_trips)

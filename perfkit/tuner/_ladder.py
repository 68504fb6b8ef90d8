"""The bracketing search over a ladder of load levels (concurrencies or arrival rates): the
highest level within budget, galloping from a start and bisecting, with the readings its answer
hinges on measured twice; and the plain level-by-level walk. The load search (_find_load)
decides the ladder and the start; this module only walks it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from perfkit.records import LevelResult, RunRecord


class OutOfTime(Exception):  # noqa: N818  # an ending of the search, not an error: the tune goes on
    """The deadline came before the load search could measure its next level. `record` holds every
    level measured before it (None: none was)."""

    def __init__(self, record: RunRecord | None = None) -> None:
        super().__init__("the deadline came before the next level could be measured")
        self.record = record


def merged(records: Sequence[RunRecord], results: Sequence[LevelResult]) -> RunRecord | None:
    """One run record (the last run's) holding the given levels, sorted by load; None without runs."""
    if not records:
        return None
    return dataclasses.replace(records[-1], levels=tuple(sorted(results, key=lambda lv: lv.load.value)))


# How many ladder steps below its start a start_suffices search walks before searching as usual.
WALK_STEPS = 2


class LoadLadder:
    """The highest ladder concurrency within budget, starting where a similar trial met it.

    From the start: gallop up (1, 1, 2, 4 ... ladder steps, or `stride` steps each move) while
    within budget, or down while over,
    then bisect between the highest level within and the lowest over. Each level is its own run.

    Closed-loop levels on a shared host are noisy: a level can read 30% over the budget while
    the same level, measured again a few seconds later, is well within it (and a level decided
    'over' early rests on a window or two). One such reading would send the whole search the
    wrong way, so two readings are confirmed by measuring the level once more, the second
    reading standing: the start level when over (a similar config met the budget there), and
    the lowest level over the budget above the answer, on which the answer rests.

    `ceiling` (open loop): a level that could not keep up tells the server's ceiling, and every
    ladder value past it is over without being measured (backlog_ceiling_rps); the search then goes
    down from there half a stride at a time instead of halving from the level it measured. A
    badly batched config that completes 20 req/s when 768 are offered is not walked down 768,
    384, ... and bisected through its slowest levels (a level at 20 req/s takes ~15 s to fill its
    windows).

    `start_suffices`: a start level within budget ends the search there (its figure a lower bound:
    nothing above it is measured); a start over the budget is walked down one ladder step at a
    time (at most WALK_STEPS), ending at the first level within the budget (the level above it read
    over: a figure at the ladder's resolution, as a bisection's), and searched down as usual from
    the lowest level over where none held. For a config that only has to show what it holds near
    its predicted rate (the predicted search's original, when it cannot compete), a level or two
    there says so, where a full gallop, bisection and re-measurement would spend many levels.

    `held_elsewhere`: a rate another config already holds. Where a level reads over the budget at
    or under that rate (the start, a step of the walk down with start_suffices, or of the gallop
    down), the search ends there, the steps below it not measured nor that level measured again:
    below it the config could not beat the other one (the predicted
    search's configs at the request path's ceiling after the first, which would otherwise spend
    levels finding a rate under the one another config already holds).

    `hopeless(level, at_floor)`: why a level over the budget shows no load can meet it (at_floor: the
    ladder's lowest value; tuner/_hopeless), or None. Such a level ends the search there: it is not
    measured again, nor is the ladder walked further down."""

    def __init__(self, measure_one: Callable[[float], RunRecord], ok: Callable[[LevelResult], bool],
                 values: Sequence[float], start_index: int, *, stride: int = 1,
                 ceiling: Callable[[LevelResult], float | None] | None = None,
                 start_suffices: bool = False, held_elsewhere: float | None = None,
                 hopeless: Callable[[LevelResult, bool], str | None] | None = None) -> None:  # fmt: skip
        self.measure_one = measure_one
        self.hopeless = hopeless
        self.start_suffices = start_suffices
        self.held_elsewhere = held_elsewhere
        self.stride = stride
        self.ceiling = ceiling
        self.cap: int | None = None  # lowest index known over from a backlog ceiling (not measured)
        self.ok = ok
        self.values = tuple(values)
        self.start_index = start_index
        self.results: dict[float, LevelResult] = {}
        self.verdicts: dict[int, bool] = {}
        self.confirmed: set[int] = set()
        self.records: list[RunRecord] = []

    def _measure(self, index: int) -> bool | None:
        """Within budget (True), over (False), or None when the run failed (the search stops)."""
        value = self.values[index]
        rec = self.measure_one(value)
        self.records.append(rec)
        if rec.status != "ok" or not rec.levels:
            for lv in rec.levels:  # what the failed run did measure stays in the record
                self.results[float(lv.load.value)] = lv
            return None
        level = rec.levels[-1]
        self.results[value] = level  # a second reading replaces the first
        self.verdicts[index] = self.ok(level)
        limit = self.ceiling(level) if self.ceiling is not None and not self.verdicts[index] else None
        if limit is not None:
            above = [i for i, v in enumerate(self.values) if v >= limit]
            if above and above[0] < index and (self.cap is None or above[0] < self.cap):
                self.cap = above[0]
        return self.verdicts[index]

    def _tighten(self, lo: int | None, hi: int | None) -> int | None:
        """hi lowered to the backlog ceiling's index, unless a level at or above it read within
        the budget (then the ceiling was noise)."""
        if self.cap is None or (lo is not None and self.cap <= lo):
            return hi
        return self.cap if hi is None or self.cap < hi else hi

    def _answered(self, index: int) -> bool:
        """Whether the level at index read over in a way that shows no load holds (`hopeless`), or
        at or under the rate another config holds (held_elsewhere)."""
        if self.verdicts.get(index) is not False:
            return False
        if self._under_held(index):
            return True
        return self.hopeless is not None and self.hopeless(self.results[self.values[index]], index == 0) is not None

    def _confirmed_over(self, index: int) -> bool | None:
        """Measure the level again if it read over and was not confirmed yet (nor shows no load
        holds); its verdict."""
        if self.verdicts.get(index) is False and index not in self.confirmed and not self._answered(index):
            self.confirmed.add(index)
            return self._measure(index)
        return self.verdicts.get(index)

    def _gallop(self, lo: int | None, hi: int | None) -> tuple[int | None, int | None] | None:
        """Widen from the known side until the boundary is bracketed: (highest index within or None,
        lowest index over or None); None when a run failed."""
        moves = 0
        while True:
            hi = self._tighten(lo, hi)
            # one ladder step twice (the answer is most often near a similar trial's), then 2, 4, ...
            step = self.stride if self.stride > 1 else (1 if moves < 2 else 2 ** (moves - 1))
            if hi is not None and hi not in self.verdicts:
                step = max(1, self.stride // 2)  # below a backlog ceiling: half a stride down
            moves += 1
            if lo is not None and hi is None:
                if lo == len(self.values) - 1:
                    return lo, hi
                nxt = min(lo + step, len(self.values) - 1)
            elif hi is not None and lo is None:
                if hi == 0:
                    return lo, hi
                nxt = max(hi - step, 0)
            else:
                return lo, hi
            verdict = self._measure(nxt)
            if verdict is None:
                return None
            if verdict:
                lo = nxt if lo is None or nxt > lo else lo
            else:
                hi = nxt if hi is None or nxt < hi else hi
                if lo is None and self._answered(nxt):
                    return lo, hi  # no load holds, or none below could beat another config: not walked further down

    def _bisect(self, lo: int | None, hi: int | None) -> tuple[int | None, int | None] | None:
        while lo is not None and hi is not None and (hi := self._tighten(lo, hi)) is not None and hi - lo > 1:
            mid = (lo + hi) // 2
            verdict = self._measure(mid)
            if verdict is None:
                return None
            if verdict:
                lo = mid
            else:
                hi = mid
        return lo, hi

    def run(self) -> RunRecord:
        """Search, then one run record holding every level measured (sorted by load). Raises
        OutOfTime (holding the levels measured) when `measure_one` does."""
        try:
            return self._run()
        except OutOfTime:
            raise OutOfTime(merged(self.records, list(self.results.values()))) from None

    def _under_held(self, index: int) -> bool:
        """Whether a level is at or under the rate another config holds (held_elsewhere)."""
        return self.held_elsewhere is not None and self.values[index] <= self.held_elsewhere

    def _walk_down(self) -> tuple[bool | None, int]:
        """start_suffices with the start over: one ladder step down at a time, at most WALK_STEPS,
        to the first level within the budget. (True, its index); (False, the lowest index read
        over) where none was; (None, -1) when a run failed."""
        lowest = self.start_index
        if self._under_held(lowest):
            return False, lowest  # over at a rate another config holds: no step down could beat that one
        for index in range(self.start_index - 1, max(self.start_index - 1 - WALK_STEPS, -1), -1):
            if self.cap is not None and index >= self.cap:
                break  # the start could not keep up: a step down is over too, the usual search goes down by more
            verdict = self._measure(index)
            if verdict is None:
                return None, -1
            if verdict:
                return True, index
            lowest = index
            if self._answered(index):
                break  # over at a rate another config holds (lower could not beat it), or no load holds
        return False, lowest

    def _run(self) -> RunRecord:
        first = self._measure(self.start_index)
        over_at = self.start_index  # the lowest level read over, where a search down starts
        # a failed run, a start that suffices, or one that shows no load holds (or over where another config holds more)
        ends = first is None or (first and self.start_suffices) or self._answered(self.start_index)
        if not ends and first is False and self.start_suffices:
            walked, over_at = self._walk_down()
            # held a step or two down, or a run failed; or below the walk it could not beat what another holds
            beaten = self._answered(over_at)
            ends = walked is not False or beaten
        elif not ends and first is False:
            first = self._confirmed_over(self.start_index)
            ends = first is None
        if not ends:
            bounds: tuple[int | None, int | None] | None = (self.start_index, None) if first else (None, over_at)
            while bounds is not None:
                bounds = self._gallop(*bounds)
                if bounds is None:
                    break
                bounds = self._bisect(*bounds)
                if bounds is None:
                    break
                lo, hi = bounds
                if hi is None or hi in self.confirmed:
                    break
                again = self._confirmed_over(hi)
                if again is None or not again:
                    break
                # The level over the budget was not: search on above it, up to the next level read over.
                above = [i for i, within in self.verdicts.items() if i > hi and not within]
                bounds = (hi, min(above) if above else None)
        out = merged(self.records, list(self.results.values()))
        assert out is not None  # the first level was measured
        return out


def run_level_by_level(
    run_spec: Callable[[Sequence[int]], RunRecord], values: Sequence[int], ok: Callable[[LevelResult], bool]
) -> RunRecord:
    """Measure levels one run each, in order until the first level over the budget, judged here
    rather than by measure (whose threshold is on the end-to-end latency, not a stream's TTFT or
    ITL). One record holding every level measured. Raises OutOfTime (holding the levels measured)
    when `run_spec` does."""
    records: list[RunRecord] = []
    try:
        for value in sorted(set(values)):
            rec = run_spec((value,))
            records.append(rec)
            if not rec.levels or rec.status != "ok" or not ok(rec.levels[-1]):
                break
    except OutOfTime:
        raise OutOfTime(merged(records, [lv for r in records for lv in r.levels])) from None
    out = merged(records, [lv for r in records for lv in r.levels])
    assert out is not None  # values holds at least one level
    return out

"""Finding a candidate's highest load within budget, cheaply.

Without history a trial measures concurrency 1, 2, 4, ... until the budget breaks. With it,
the search starts where the most similar earlier trial met the budget and walks a ladder of
levels a factor sqrt(2) apart: galloping up (or down) from there until the boundary is
bracketed, then bisecting it (3-4 levels instead of 5-7 for an answer near the start, and a
far answer, such as the concurrency a much larger batch needs, is still reached). A level
reading over the budget where the answer hinges on it is measured once more (see
_LadderSearch). Levels end as soon as they are clearly over or under the budget
(ProfileSpec.stop_when_decided).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from perfkit.records import LevelResult, LoadLevel, RunRecord
from perfkit.server.base import Server
from perfkit.tuner._judge import JudgeSettings, level_within_budget

Measure = Callable[..., RunRecord]


def _distance(a: Mapping[str, Any], b: Mapping[str, Any]) -> float:
    d = 0.0
    for key in set(a) | set(b):
        x, y = a.get(key), b.get(key)
        if x == y:
            continue
        num = (int, float)
        if isinstance(x, num) and isinstance(y, num) and not isinstance(x, bool) and not isinstance(y, bool):
            d += abs(math.log2(max(float(x), 0.5) / max(float(y), 0.5)))  # a doubling counts as one change
        else:
            d += 1.0
    return d


def start_concurrency(history: Sequence[tuple[Mapping[str, Any], float]], params: Mapping[str, Any]) -> float | None:
    """The load (concurrency or arrival rate) at which the most similar earlier trial met the
    budget (ties: the most recent); None without history. history: (params, highest feasible
    load), oldest first."""
    if not history:
        return None
    nearest = min(range(len(history)), key=lambda i: (_distance(history[i][0], params), -i))
    return history[nearest][1]


def _doubling(low: int, high: int) -> tuple[int, ...]:
    """low, 2*low, ... up to high (included)."""
    out, c = [], max(1, low)
    while c < high:
        out.append(c)
        c *= 2
    out.append(high)
    return tuple(dict.fromkeys(out))


def find_load(
    measure: Measure,
    server: Server,
    judge: JudgeSettings,
    model: str,
    start: float | None,
    *,
    command: tuple[str, ...] = (),
    record_path: Path | None = None,
) -> RunRecord:
    """Measure a loaded candidate up to its highest load within the budget (concurrency, or
    for open loop the highest sustainable arrival rate); returns one run record holding every
    level measured (sorted by load). Raises what measure raises."""

    def ok(lv: LevelResult) -> bool:
        return level_within_budget(lv, judge.latency_budget_ms, judge.percentile, judge.budget_metric, judge.mix_scale)

    def run_spec(values: Sequence[float], bisect: bool) -> RunRecord:
        levels = tuple(judge.level(v) for v in values)
        return measure(server, judge.spec(model, levels, bisect=bisect), command=command,
                       record_path=record_path)  # fmt: skip

    if judge.open_loop:
        if start is None and judge.load_mode == "trace":
            start = judge.trace_base_rps  # the trace as recorded (speed 1)
        if start is None:
            start = _probe_rate(
                lambda lv: measure(server, judge.spec(model, (lv,)), command=command, record_path=record_path)
            )
        values = rate_ladder(start, judge.max_rate_rps)
        # Double the rate per move, then bisect back to the ladder's resolution: a level below the
        # answer is slow to fill its windows (about 50 requests each), one above it is quick, so
        # overshooting costs little and creeping up from a low start (the probe's, or a similar
        # trial's that sustained far less) costs most of a trial.
        search = _LadderSearch(lambda v: run_spec((v,), False), ok, values, values.index(start_on(values, start)),
                               stride=RATE_STEPS_PER_DOUBLING, ceiling=capacity_ceiling)  # fmt: skip
        merged = search.run()
        if record_path is not None:
            merged.save(record_path)
        return merged
    if start is None:
        doubling = _doubling(1, judge.max_concurrency)
        if judge.judged_by_measure:
            first_run = run_spec(doubling, False)
        else:
            first_run = _run_level_by_level(lambda v: run_spec(v, False), doubling, ok)
        if record_path is not None and not judge.judged_by_measure:
            first_run.save(record_path)
        return first_run
    values = tuple(float(v) for v in ladder(int(start), judge.max_concurrency))
    first = float(min(max(int(start), 1), judge.max_concurrency))
    search = _LadderSearch(lambda v: run_spec((v,), False), ok, values, values.index(first))
    merged = search.run()
    if record_path is not None:
        merged.save(record_path)
    return merged


# Arrival rates a factor 2**(1/8) (~9%) apart: the open-loop search's resolution. In open loop
# every config within budget at a rate reads that rate as its throughput, so configs whose
# sustainable rates fall between two steps tie; at 2**(1/4) (19%) the tuner could not tell a
# config from one 15% better (benchmarks/tune_claims.py). One more level per trial buys 9%.
RATE_STEPS_PER_DOUBLING = 8
MIN_RATE_RPS = 1.0


def rate_ladder(start_rps: float, max_rate_rps: float) -> tuple[float, ...]:
    """Arrival rates a factor 2**(1/RATE_STEPS_PER_DOUBLING) apart through start_rps, from MIN_RATE_RPS up to
    max_rate_rps (rounded to 3 significant digits)."""
    start_rps = min(max(start_rps, MIN_RATE_RPS), max_rate_rps)
    n = RATE_STEPS_PER_DOUBLING
    down = math.ceil(n * math.log2(start_rps / MIN_RATE_RPS))
    up = math.ceil(n * math.log2(max(max_rate_rps / start_rps, 1.0)))
    values = {start_rps * 2 ** (k / n) for k in range(-down, up + 1)}
    kept = {float(f"{v:.3g}") for v in values if MIN_RATE_RPS <= v <= max_rate_rps}
    return tuple(sorted(kept | {float(f"{start_rps:.3g}")}))


def start_on(values: Sequence[float], start: float) -> float:
    """The ladder value nearest to start (on a log scale)."""
    return min(values, key=lambda v: abs(math.log(v / max(start, 1e-9))))


def step_below(values: Sequence[float], value: float) -> float | None:
    """The ladder value one step below value, or None at the bottom."""
    lower = [v for v in values if v < value * (1 - 1e-9)]
    return max(lower) if lower else None


def _probe_rate(measure_level: Callable[[LoadLevel], RunRecord]) -> float:
    """Where an open-loop search starts without history: half the throughput of one request at
    a time (concurrency 1, closed loop), a rate nearly any config sustains; the ladder gallops up
    from there."""
    rec = measure_level(LoadLevel("concurrency", 1.0))
    tput = rec.levels[-1].completed_rps if rec.levels else 0.0
    return max(MIN_RATE_RPS, 0.5 * tput)


def capacity_ceiling(level: LevelResult) -> float | None:
    """A rate every level above which is over the budget, from an overloaded open-loop level: one
    that completed well under what it sent (a backlog grew) completed at the server's capacity,
    and no rate past capacity (plus 5% for noise) is sustainable. None when the level kept up."""
    sent = min(level.load.value, level.sent_rps) if level.sent_rps > 0 else level.load.value
    if level.load.mode == "concurrency" or level.completed_rps <= 0 or level.completed_rps >= 0.9 * sent:
        return None
    return level.completed_rps * 1.05


def ladder(start: int, max_concurrency: int) -> tuple[int, ...]:
    """Concurrencies a factor ~sqrt(2) apart through start, from 1 to max_concurrency (both
    included): the resolution of the search."""
    start = min(max(start, 1), max_concurrency)
    down = math.ceil(2 * math.log2(start)) + 1
    up = math.ceil(2 * math.log2(max(max_concurrency / start, 1.0))) + 1
    values = {min(max_concurrency, max(1, round(start * 2 ** (k / 2)))) for k in range(-down, up + 1)}
    return tuple(sorted(values | {1, max_concurrency}))


class _LadderSearch:
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

    `ceiling` (open loop): a level that could not keep up tells the server's capacity, and every
    ladder value past it is over without being measured (capacity_ceiling); the search then goes
    down from there half a stride at a time instead of halving from the level it measured. A
    badly batched config that completes 20 req/s when 768 are offered is not walked down 768,
    384, ... and bisected through its slowest levels (a level at 20 req/s takes ~15 s to fill its
    windows)."""

    def __init__(self, measure_one: Callable[[float], RunRecord], ok: Callable[[LevelResult], bool],
                 values: Sequence[float], start_index: int, *, stride: int = 1,
                 ceiling: Callable[[LevelResult], float | None] | None = None) -> None:  # fmt: skip
        self.measure_one = measure_one
        self.stride = stride
        self.ceiling = ceiling
        self.cap: int | None = None  # lowest index known over from a capacity ceiling (not measured)
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
        """hi lowered to the capacity ceiling's index, unless a level at or above it read within
        the budget (then the ceiling was noise)."""
        if self.cap is None or (lo is not None and self.cap <= lo):
            return hi
        return self.cap if hi is None or self.cap < hi else hi

    def _confirmed_over(self, index: int) -> bool | None:
        """Measure the level again if it read over and was not confirmed yet; its verdict."""
        if self.verdicts.get(index) is False and index not in self.confirmed:
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
                step = max(1, self.stride // 2)  # below a capacity ceiling: half a stride down
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
        """Search, then one run record holding every level measured (sorted by load)."""
        first = self._measure(self.start_index)
        if first is False:
            first = self._confirmed_over(self.start_index)
        if first is not None:
            bounds: tuple[int | None, int | None] | None = (
                (self.start_index, None) if first else (None, self.start_index)
            )
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
        last = self.records[-1]
        levels = sorted(self.results.values(), key=lambda lv: lv.load.value)
        return dataclasses.replace(last, levels=tuple(levels))


def _run_level_by_level(
    run_spec: Callable[[Sequence[int]], RunRecord], values: Sequence[int], ok: Callable[[LevelResult], bool]
) -> RunRecord:
    """Measure levels one run each, in order until the first level over the budget, judged here
    rather than by measure (whose threshold is on the end-to-end latency, not a stream's TTFT or
    ITL). One record holding every level measured."""
    records: list[RunRecord] = []
    for value in sorted(set(values)):
        rec = run_spec((value,))
        records.append(rec)
        if not rec.levels or rec.status != "ok" or not ok(rec.levels[-1]):
            break
    last = records[-1]
    levels = sorted((lv for r in records for lv in r.levels), key=lambda lv: lv.load.value)
    return dataclasses.replace(last, levels=tuple(levels))

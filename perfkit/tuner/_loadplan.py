"""Finding a candidate's highest load within budget, cheaply.

Without history a trial measures concurrency 1, 2, 4, ... until the budget breaks. With it,
the search starts where the most similar earlier trial met the budget: a bracket of levels
a factor sqrt(2) apart around that concurrency, bisected (2-3 levels instead of 5-7), then
widened below or above only if the answer lies outside the bracket. Levels end as soon as
they are clearly over or under the budget (ProfileSpec.stop_when_decided).
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


def start_concurrency(history: Sequence[tuple[Mapping[str, Any], int]], params: Mapping[str, Any]) -> int | None:
    """The concurrency at which the most similar earlier trial met the budget (ties: the most
    recent); None without history. history: (params, highest feasible concurrency), oldest first."""
    if not history:
        return None
    nearest = min(range(len(history)), key=lambda i: (_distance(history[i][0], params), -i))
    return history[nearest][1]


def bracket(center: int, max_concurrency: int) -> tuple[int, ...]:
    """Concurrencies a factor ~sqrt(2) apart from center/2 to 2*center (center at least 2),
    within [1, max]."""
    center = max(center, 2)  # around 1 the bracket would hold only {1, 2}
    values = {min(max_concurrency, max(1, round(center * 2 ** (k / 2)))) for k in range(-2, 3)}
    return tuple(sorted(values))


def _doubling(low: int, high: int) -> tuple[int, ...]:
    """low, 2*low, ... up to high (included)."""
    out, c = [], max(1, low)
    while c < high:
        out.append(c)
        c *= 2
    out.append(high)
    return tuple(dict.fromkeys(out))


def _levels(values: Sequence[int]) -> tuple[LoadLevel, ...]:
    return tuple(LoadLevel("concurrency", float(v)) for v in values)


def find_load(
    measure: Measure,
    server: Server,
    judge: JudgeSettings,
    model: str,
    start: int | None,
    *,
    command: tuple[str, ...] = (),
    record_path: Path | None = None,
) -> RunRecord:
    """Measure a loaded candidate up to its highest concurrency within the budget; returns one
    run record holding every level measured (sorted by load). Raises what measure raises."""

    def ok(lv: LevelResult) -> bool:
        return level_within_budget(lv, judge.latency_budget_ms, judge.percentile, judge.budget_metric)

    def run_spec(values: Sequence[int], bisect: bool) -> RunRecord:
        return measure(server, judge.spec(model, _levels(values), bisect=bisect), command=command,
                       record_path=record_path)  # fmt: skip

    def run(values: Sequence[int], bisect: bool) -> RunRecord:
        if judge.judged_by_measure:
            return run_spec(values, bisect)
        return _run_level_by_level(run_spec, values, bisect, ok)

    if start is None:
        first_run = run(_doubling(1, judge.max_concurrency), False)
        if record_path is not None and not judge.judged_by_measure:
            first_run.save(record_path)
        return first_run
    values = bracket(start, judge.max_concurrency)
    first = run(values, len(values) > 2)
    levels: list[LevelResult] = list(first.levels)
    within = [int(lv.load.value) for lv in levels if ok(lv)]
    if first.status == "ok":
        if not within and values[0] > 1:
            # All over: the answer lies below the bracket (down to concurrency 1, which decides pruning).
            below = run(_doubling(1, values[0] - 1), False)
            levels += below.levels
        elif within and max(within) == values[-1] and values[-1] < judge.max_concurrency:
            # Within budget at the top: the boundary is most likely just above, so double
            # step by step (stopping at the first level over) rather than bisect a wide range.
            top = values[-1]
            above = [v for v in _doubling(top * 2, judge.max_concurrency) if v > top]
            levels += run(above, False).levels
    merged = dataclasses.replace(first, levels=tuple(sorted(levels, key=lambda lv: lv.load.value)))
    if record_path is not None:
        merged.save(record_path)
    return merged


def _run_level_by_level(
    run_spec: Callable[[Sequence[int], bool], RunRecord],
    values: Sequence[int],
    bisect: bool,
    ok: Callable[[LevelResult], bool],
) -> RunRecord:
    """Measure levels one run each, judged here rather than by measure (whose threshold is on the
    end-to-end latency, not a stream's TTFT or ITL): in order until the first level over the
    budget, or bisected for the highest level within it. One record holding every level measured."""
    records: list[RunRecord] = []
    ordered = sorted(set(values))

    def one(value: int) -> LevelResult | None:
        rec = run_spec((value,), False)
        records.append(rec)
        return rec.levels[-1] if rec.levels and rec.status == "ok" else None

    if bisect:
        lo, hi = 0, len(ordered) - 1
        while lo <= hi:
            mid = (lo + hi) // 2
            level = one(ordered[mid])
            if level is None:
                break
            if ok(level):
                lo = mid + 1
            else:
                hi = mid - 1
    else:
        for value in ordered:
            level = one(value)
            if level is None or not ok(level):
                break
    last = records[-1]
    levels = sorted((lv for r in records for lv in r.levels), key=lambda lv: lv.load.value)
    return dataclasses.replace(last, levels=tuple(levels))

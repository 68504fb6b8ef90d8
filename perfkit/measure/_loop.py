"""The level loop of a profile, one for the local and the distributed run: which levels are measured in
which order, when the sweep stops, when the record is saved, and the progress events around each level.

What differs between the two runs, how one level is measured (one load generator here, load workers
on a Ray cluster there) and what must be open while levels are measured, is the caller's measurer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Protocol

from perfkit.errors import MeasurementError, ServerError, ServerRefusedError
from perfkit.measure._events import LevelDone, LevelStarted, Progress
from perfkit.measure._level import LevelOutcome
from perfkit.measure._pa_search import pa_binary_search
from perfkit.measure._periodic import periodic_level
from perfkit.records import LevelResult, LoadLevel, ProfileSpec, RunRecord

# the measure stage's one logger, whichever of its modules runs the level (the package docstring names it)
_log = logging.getLogger("perfkit.measure")

MeasureOne = Callable[[LoadLevel], LevelOutcome]
"""Measures one level; an outcome with an `error` ends the run there (the record saved as failed)."""


class SaveRecord(Protocol):
    """Builds the run record of the levels measured so far, saves it where asked, and returns it."""

    def __call__(self, levels: list[LevelResult], status: str = "ok", error: str | None = None) -> RunRecord: ...


def run_levels(
    spec: ProfileSpec,
    measurer: AbstractContextManager[MeasureOne],
    save: SaveRecord,
    on_progress: Progress | None = None,
) -> RunRecord:
    """Measure spec's levels with what `measurer` opens, saving the record after each; returns the record.

    Raises MeasurementError (with `.record` holding what was measured) when a level ends in an error,
    the server fails (a ServerError; a ServerRefusedError goes on as itself, after the record is saved
    as failed) or the run is interrupted (the KeyboardInterrupt itself goes on,
    after the record is saved as interrupted).
    """
    levels: list[LevelResult] = []
    try:
        with measurer as measure:

            def run(level: LoadLevel) -> LevelResult:
                _log.info("measuring %s of %s", level.label, spec.mix_label)
                if on_progress:
                    on_progress(LevelStarted(level))
                outcome = measure(level)
                levels.append(outcome.result)
                if outcome.error:
                    rec = save(levels, "failed", outcome.error)
                    raise MeasurementError(outcome.error, hint="partial results saved").with_record(rec)
                save(levels)
                r = outcome.result
                _log.info(
                    "%s: %.1f infer/s, p99 %.2f ms, %s after %d windows",
                    level.label,
                    r.throughput_infer_per_s,
                    r.latency().p99_us / 1e3,
                    "stable" if r.stable else "unstable",
                    len(r.windows),
                )
                if on_progress:
                    on_progress(LevelDone(level, r))
                return r

            walk_levels(spec, run)
    except KeyboardInterrupt:
        save(levels, "interrupted", "interrupted by the user")
        raise
    except ServerRefusedError as err:  # refused before any load for how it was started: exit 4, naming what to change
        save(levels, "failed", err.one_line())
        raise
    except ServerError as err:
        rec = save(levels, "failed", err.one_line())
        raise MeasurementError(f"measurement failed: {err.one_line()}").with_record(rec) from err
    if spec.binary_search:
        levels.sort(key=lambda r: r.load.value)
    return save(levels)


def walk_levels(spec: ProfileSpec, run: Callable[[LoadLevel], LevelResult]) -> None:
    """Run spec's levels in their order: the periodic run's one level, a binary search, or the sweep
    (which stops at the first level past `-l`)."""
    if spec.periodic_concurrency is not None:
        run(periodic_level(spec))
    elif spec.binary_search and spec.latency_threshold_ms is not None and spec.stop_rule == "stability":
        pa_binary_search(spec, run)  # perf_analyzer's rule, perf_analyzer's order of levels
    elif spec.binary_search and spec.latency_threshold_ms is not None:
        _binary_search(spec, run)
    else:
        for level in spec.levels:
            if over_latency_threshold(spec, run(level)):
                break


def over_latency_threshold(spec: ProfileSpec, result: LevelResult) -> bool:
    """Whether a level's latency (mean, or spec.percentile) is past `-l`: the sweep stops there.

    perf_analyzer's --latency-threshold, on the latency alone: a level with errors or an open-loop
    shortfall under it does not stop the sweep. Not a verdict: whether a level is within a latency
    budget is perfkit.records.Budget.within, which the tuner applies to every level measured."""
    if spec.latency_threshold_ms is None:
        return False
    lat = result.latency()
    value = lat.mean_us if spec.percentile is None else lat.percentile_us(spec.percentile)
    return value > spec.latency_threshold_ms * 1e3


def _binary_search(spec: ProfileSpec, run: Callable[[LoadLevel], LevelResult]) -> None:
    """Highest level within the latency threshold, perf_analyzer's --binary-search over the range."""
    values = sorted({lv.value for lv in spec.levels})
    template = spec.levels[0]
    lo, hi = 0, len(values) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        result = run(LoadLevel(template.mode, values[mid], template.distribution))
        if over_latency_threshold(spec, result):
            hi = mid - 1
        else:
            lo = mid + 1


def nothing_measured(record: RunRecord) -> str | None:
    """Why a run measured nothing (no level completed a single request without error), else None.

    Whatever the model kind (unary, sequence, decoupled), such a run has no result to report.
    """
    if not record.levels or any(lv.inference_count > 0 for lv in record.levels):
        return None
    sent = sum(lv.request_count for lv in record.levels)
    failed = sum(lv.error_count for lv in record.levels)
    if sent == 0:
        return f"measured nothing: no request to {record.spec.model!r} completed"
    notes = next((lv.note for lv in record.levels if lv.note), "") or ", ".join(
        f"{k} ×{v}" for lv in record.levels for k, v in lv.errors.items()
    )
    return f"measured nothing: all {failed} of {sent} requests to {record.spec.model!r} failed ({notes[:300]})"

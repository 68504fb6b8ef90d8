"""A trial whose load search was cut short: by --max-time, or by a level that already answered it.

The deadline ends a load search between levels (perfkit.tuner._ladder.OutOfTime, holding the levels
measured). Where one of those levels, in the trial's own load mode, held the budget, the trial keeps
it: its figure is the highest level it held, a lower bound (records.M_LOWER_BOUND: the search did not
finish above it), and the tune can confirm and recommend it as any other. Where every level it
measured was over the budget, the trial is judged as a finished search with that reading is (pruned
where its lowest level was over). Only a search that measured nothing of its mode (an open-loop
search's closed-loop probe says nothing of an arrival rate) fails, and is queued again for --resume.
"""

from __future__ import annotations

import dataclasses

from perfkit.records import M_LOWER_BOUND, RunRecord
from perfkit.tuner._find_load import TrialLoadSettings
from perfkit.tuner._hopeless import at_least_load, hopeless
from perfkit.tuner._verdict import TrialVerdict


def cut_record(record: RunRecord | None, trial_load: TrialLoadSettings) -> RunRecord | None:
    """The levels of a cut search that can judge the trial (those in its load mode), as one
    record; None where there are none."""
    if record is None:
        return None
    mode = trial_load.level(1.0).mode
    levels = tuple(lv for lv in record.levels if lv.load.mode == mode)
    return dataclasses.replace(record, levels=levels) if levels else None


def cut_note(max_time_s: float | None, levels: int) -> str:
    """How a trial cut by the deadline is told (its line, its prune reason)."""
    return f"load search cut by --max-time {max_time_s or 0:g} s after {levels} level{'s' if levels != 1 else ''}"


def cut_verdict(verdict: TrialVerdict, note: str) -> TrialVerdict:
    """A cut trial's verdict: its held figure marked as a lower bound, and why the search ended."""
    metrics = {**verdict.metrics, M_LOWER_BOUND: 1.0} if verdict.feasible_load is not None else verdict.metrics
    return dataclasses.replace(verdict, metrics=metrics, search_cut=note)


def answered(verdict: TrialVerdict, record: RunRecord, trial_load: TrialLoadSettings) -> TrialVerdict:
    """A verdict whose lowest level was over the budget, with why no load holds where that level shows
    it (the rule that ended its search, tuner/_hopeless); unchanged otherwise."""
    if not verdict.lowest_over_budget or verdict.search_cut or not record.levels:
        return verdict
    low = record.levels[0]
    why = hopeless(low, trial_load.budget, trial_load.batch_size, at_floor=at_least_load(low))
    return verdict if why is None else dataclasses.replace(verdict, search_cut=why)

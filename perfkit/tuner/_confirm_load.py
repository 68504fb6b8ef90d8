"""Confirming one candidate at a load (confirm_one): `repeats` independent runs there, each with
more windows than a search's level, no early stop and at least `min_repeat_s` long (tune's
--confirm-time, 5 s by default: one window of perf_analyzer's default --measurement-interval,
5000 ms: a repeat of a couple of short windows reads the percentile low against a longer run at the
same rate, since rare slow requests and queue excursions need time to show). The load holds when
every repeat's percentile is within the budget (and, open loop, every repeat is sustainable) and
the percentile's upper bound is within it too (the margin: repeats that read just under the
budget do not make a claim).

The bound is where an independent re-measurement as long as the confirmation (its `repeats` runs
together) would read the percentile, at ~95%: how perf_analyzer reads a level, its stability
window's measurements merged (perfkit.tuner._claim_stats). If the true percentile at that load
were at or over the budget, each repeat would read within it with probability at most about 1/2,
so all of 3 repeats would with probability at most 1/8 (a sign test); the bound keeps a claim off
the budget's edge, where a re-measurement is a coin toss.

Where every repeat read within the budget and only the bound is over, up to `extra_repeats` more
runs are made at the same load while they could still bring it under (the bound's t factor and
the mean's share shrink with more runs, as perf_analyzer keeps measuring a level until it is
stable, up to --max-trials), and where they cannot, the next load tried is half a ladder step
down, not a whole one: the percentile sits just under the budget there, so the sustainable rate
lies just below, and a whole step down would leave the claim well under the rate an anchor sustains
(benchmarks/results/design-evidence.md).
When the load fails, the next load down the same ladder is confirmed instead (the claim steps
down, and says so); after MAX_STEPS_DOWN steps the candidate is demoted. A repeat over the budget,
or so wide by its own interval that repeats reading alike could not make the bound, fails a load
whatever the others read: the rest are not run there (cannot_hold). A load's first run whose
latency fell part way through (its windows drifted down: the config still settling after it was
put, past its warm-up) is made once more and not counted, as perf_analyzer reports only windows
that agree (its stability check).

The claimed throughput is the mean over the repeats (open loop: each scaled to the rate asked)
with the ~95% interval one more run would read in (summarize_repeats); the percentile is reported
as the worst repeat and the upper bound above.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from perfkit.records import Confirmation, LevelResult, LoadLevel, RunRecord
from perfkit.tuner._claim_stats import (
    cannot_hold,
    more_could_hold,
    only_bound_over,
    summarize_repeats,
    warmed_up_late,
)
from perfkit.tuner._find_load import MIN_RATE_RPS, RATE_STEPS_PER_DOUBLING, ladder, rate_ladder, step_below
from perfkit.tuner._settings import CONFIRM_EXTRA_REPEATS, CONFIRM_MIN_WINDOWS
from perfkit.tuner._trial import TrialRunner


@dataclass(frozen=True)
class ConfirmSettings:
    """How picks are confirmed. repeats 0 turns confirmation off."""

    repeats: int = 3
    min_windows: int = CONFIRM_MIN_WINDOWS
    max_windows: int = 2 * CONFIRM_MIN_WINDOWS
    min_repeat_s: float = 0.0  # each repeat spans at least this long (tune's --confirm-time, 5 s by default)
    rivals_within: float = 0.2  # rivals whose searched figure is within 20% of the pick's
    max_candidates: int = 3
    extra_repeats: int = CONFIRM_EXTRA_REPEATS  # more runs where every repeat read within the budget, not its bound


HALF_STEP = 2 ** (1 / (2 * RATE_STEPS_PER_DOUBLING))  # half a step of the arrival-rate ladder, as a factor
MAX_STEPS_DOWN = 2  # ladder steps below the search's load tried before a candidate is demoted
# An arrival rate within half a ladder step above a claim already held ties with it: each trial's
# ladder is anchored at its own search's rate, so a step of one lands anywhere near another's claim,
# and a rate there could beat it only by noise (a demoted config taken up again can hold a rate a
# fraction of a percent above the claim). Such a rate is not tried.
TIE_ABOVE = HALF_STEP


def _beats(load: LoadLevel, floor: float) -> bool:
    """Whether a load lies above floor (a load value a claim already holds at) by more than a tie:
    an arrival rate by TIE_ABOVE, a concurrency by any step."""
    return load.value > floor if load.mode == "concurrency" else load.value > floor * TIE_ABOVE


def _lower_load(t: TrialRunner, load: LoadLevel) -> LoadLevel | None:
    if load.mode == "concurrency":
        values: Sequence[float] = [float(v) for v in ladder(int(load.value), t.trial_load.max_concurrency)]
    else:
        values = rate_ladder(load.value, t.trial_load.max_rate_rps)
    below = step_below(values, load.value)
    return None if below is None else t.trial_load.level(below)


def _half_below(t: TrialRunner, load: LoadLevel) -> LoadLevel | None:
    """An arrival rate half a ladder step below load's (rounded as the ladder is), or None at the
    ladder's floor."""
    value = float(f"{load.value / HALF_STEP:.3g}")
    return t.trial_load.level(value) if MIN_RATE_RPS <= value < load.value else None


def _predicted_below(t: TrialRunner, last: LoadLevel, predicted_rps: float | None, floor: float | None,
                     until: float | None) -> LoadLevel | None:  # fmt: skip
    """The predicted rate as a last load to confirm: an arrival rate more than half a ladder step
    below the last one tried (a step nearer was as good as tried), above `floor` by more than a tie,
    with time left; None otherwise."""
    if predicted_rps is None or last.mode != "request_rate" or (until is not None and time.monotonic() >= until):
        return None
    value = float(f"{predicted_rps:.3g}")  # rounded as the ladder's rates are
    if not MIN_RATE_RPS <= value < last.value / HALF_STEP:
        return None
    level = t.trial_load.level(value)
    return level if floor is None or _beats(level, floor) else None


def repeat_windows(window_ms: float, cs: ConfirmSettings) -> tuple[int, int]:
    """(min, max) windows of one confirmation repeat: at least cs.min_windows, and enough for
    cs.min_repeat_s; the max leaves the same room for stability past the min as cs does."""
    least = max(cs.min_windows, math.ceil(cs.min_repeat_s * 1000.0 / max(window_ms, 1e-3) - 1e-9))
    return least, least + max(0, cs.max_windows - cs.min_windows)


def _measure_repeats(t: TrialRunner, number: int, load: LoadLevel, cs: ConfirmSettings) -> list[LevelResult]:
    measure = t.measure
    base = t.trial_load.spec(t.model, (load,))
    least, most = repeat_windows(base.measurement_interval_ms, cs)
    spec = dataclasses.replace(
        base,
        stop_when_decided=False,
        binary_search=False,
        latency_threshold_ms=None,
        min_windows=least,
        max_trials=most,
    )
    out: list[LevelResult] = []
    folder = t.out_dir / "confirm"
    folder.mkdir(parents=True, exist_ok=True)
    tag = f"{load.value:g}".replace(".", "_")
    budget = t.s.budget
    most_runs = cs.repeats + cs.extra_repeats
    settling = True  # a first run that warmed up late is made once more (warmed_up_late)
    for r in itertools.count():
        if len(out) >= cs.repeats:
            # all within the budget but not the bound: more runs while they could bring it under
            done = summarize_repeats(load, out, repeats=cs.repeats, budget=budget)
            if done.held or not only_bound_over(out, budget) or not more_could_hold(out, budget, cs.repeats, most_runs):
                break
        path = folder / f"trial-{number:03d}-{tag}-{r + 1}.json"
        # Each repeat draws its own arrival schedule (open loop): independent re-measurements.
        rec: RunRecord = measure(
            t.server, dataclasses.replace(spec, seed=spec.seed + 1 + r), command=t.s.command, record_path=path
        )
        if not path.exists():
            rec.save(path)
        if rec.status != "ok" or not rec.levels:
            break
        if settling and not out and warmed_up_late(rec.levels[-1]):
            settling = False  # its record stays on file; it is not one of the repeats
            continue
        out.append(rec.levels[-1])
        if cannot_hold(out[-1], budget, cs.repeats):
            break  # the load cannot be claimed whatever the other repeats read: on to the next one down
    return out


def confirm_one(
    t: TrialRunner,
    number: int,
    load: LoadLevel,
    cs: ConfirmSettings,
    floor: float | None = None,
    max_steps: int | None = MAX_STEPS_DOWN,
    until: float | None = None,
    floor_why: str = "where another pick already holds",
    predicted_rps: float | None = None,
) -> Confirmation:
    """Confirm one trial (its config already serving) at its load, stepping down at most
    `max_steps` ladder steps (None: no count; below a rate whose runs all read within the budget,
    half a step, counted half), never to a load at or below `floor`, nor to a rate within
    TIE_ABOVE of it (a rival of a pick already confirmed there: at the pick's load it could only
    tie, by noise; `floor_why` says why in the note), and not after `until` (time.monotonic();
    None: no limit).

    `predicted_rps` (the predicted search's rate for this config, open loop): where the steps end
    without a hold above it, that rate is confirmed last. A search's level is short, and its
    percentile can read low (a stream's TTFT p99 read 46 ms at 118 req/s where 7.5 s runs read over
    50 ms down to 99), while the simulator's figure is the other estimate of where the config holds:
    a candidate is demoted only once both failed."""

    def at(level: LoadLevel) -> tuple[Confirmation, bool]:
        """The confirmation at a level, and whether its runs all read within the budget (a rate's
        next step down is then half a step)."""
        levels = _measure_repeats(t, number, level, cs)
        edge = level.mode == "request_rate" and only_bound_over(levels, t.s.budget)
        return summarize_repeats(level, levels, repeats=cs.repeats, budget=t.s.budget), edge

    first, half = at(load)
    if first.held:
        return first
    notes = [f"{load.label}: {first.note}"]
    current = first
    level = load
    steps = 0.0  # a half step (below a rate whose runs all read within the budget) counts half
    while max_steps is None or steps < max_steps:
        if until is not None and time.monotonic() >= until:
            notes.append("not stepped further down: --max-time reached")
            break
        lower = _half_below(t, level) if half else _lower_load(t, level)
        if lower is None:
            break
        if floor is not None and not _beats(lower, floor):
            notes.append(f"not tried at {lower.label} or below, {floor_why}")
            break
        level = lower
        steps += 0.5 if half else 1.0
        how = " (half a step down: only the bound was over)" if half else ""
        current, half = at(level)
        if current.held:
            notes.append(f"held at {level.label}{how}")
            break
        notes.append(f"{level.label}: {current.note}")
    if not current.held and (lower := _predicted_below(t, level, predicted_rps, floor, until)) is not None:
        level = lower
        current, _ = at(level)
        notes.append(f"held at {level.label} (its predicted rate)" if current.held
                     else f"{level.label} (its predicted rate): {current.note}")  # fmt: skip
    if current is first:
        return first if len(notes) == 1 else dataclasses.replace(first, note="; ".join(notes))
    return dataclasses.replace(current, searched_load=load, note="; ".join(notes))

"""Confirmation: the pick (and the rivals whose rank depends on it) re-measured before it is
claimed.

The search reads each level once, in short windows that stop as soon as the level looks on one
side of the budget, so the best of many trials is the one most favoured by noise (the winner's
curse): its figure sits on the budget's edge. Before a figure is claimed it is measured again:
`repeats` independent runs at the trial's load, each with more windows, no early stop and at
least `min_repeat_s` long (tune's --confirm-time, 5 s by default: one window of perf_analyzer's
default --measurement-interval, 5000 ms; a repeat of a couple of short windows read p99 3-8%
below a 6 s perf_analyzer run at the same rate, since rare slow requests and queue excursions
need time to show). The claim holds when every repeat's percentile is within the budget (and,
open loop, every repeat is sustainable) and the percentile's upper bound is within it too (the
margin: repeats that read just under the budget do not make a claim).

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
lies just below (hungry at 845 req/s read p99 147, 143 and 149 ms against 150; whole steps down
left its claims at 0.83x and 0.88x perf_analyzer's sustainable rate).
When the search's load fails, the next load down the same ladder is confirmed instead (the claim
steps down, and says so); after MAX_STEPS_DOWN steps the trial is demoted: it is never recommended,
and the trial table says why. A demoted trial whose ladder still reaches above the best claim held
later (by a config the search read lower) is resumed, one step further down at a time while it
could still beat that claim (resume_demoted): on a host whose readings swing, the config the
search read best can still hold more than the next one, a few steps down. A repeat over the
budget, or so wide by its own interval that repeats reading alike could not make the bound, fails
a load whatever the others read: the rest are not run there (cannot_hold). A load's first run
whose latency fell part way through (its windows drifted down: the config still settling after it
was put, past its warm-up) is made once more and not counted, as perf_analyzer reports only
windows that agree (its stability check).

The claimed throughput is the mean over the repeats (open loop: each scaled to the rate asked)
with the ~95% interval one more run would read in (summarize_repeats); the percentile is reported
as the worst repeat and the upper bound above.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import TrialState

from perfkit.errors import CandidateNotAppliedError, MeasurementError, ModelLoadError
from perfkit.records import Confirmation, LevelResult, LoadLevel, RunRecord, from_dict, to_dict
from perfkit.tuner import _trial_state
from perfkit.tuner._claim_stats import (
    cannot_hold,
    describe,
    more_could_hold,
    near_edge,
    summarize_repeats,
    warmed_up_late,
)
from perfkit.tuner._events import ConfirmDone, ConfirmSkipped, ConfirmStarted, fmt_params
from perfkit.tuner._load_search import MIN_RATE_RPS, RATE_STEPS_PER_DOUBLING, ladder, rate_ladder, step_below
from perfkit.tuner._settings import CONFIRM_EXTRA_REPEATS, CONFIRM_MIN_WINDOWS
from perfkit.tuner._trial import TrialRunner

ATTR_PREFIX = "confirmation:"


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


MAX_ATTEMPTS = 6  # candidates confirmed at most while none holds
HALF_STEP = 2 ** (1 / (2 * RATE_STEPS_PER_DOUBLING))  # half a step of the arrival-rate ladder, as a factor
MAX_STEPS_DOWN = 2  # ladder steps below the search's load tried before a candidate is demoted
# A demoted candidate is taken further down to this fraction of its search's load at the lowest: one
# that holds only below it was read far off by its search.
RESUME_DOWN_TO = 0.5
# An arrival rate within half a ladder step above a claim already held ties with it: each trial's
# ladder is anchored at its own search's rate, so a step of one lands anywhere near another's claim,
# and a rate there could beat it only by noise (onnx_mlp: a demoted config taken up again held
# 7,860 req/s in three longer runs against a claim at 7,850). Such a rate is not tried.
TIE_ABOVE = HALF_STEP


def _per_unit(ft: optuna.trial.FrozenTrial, throughput: float) -> float:
    """Throughput over the hardware units the objective counts (1 unless per-instance/per-gpu)."""
    return throughput / _trial_state.read(ft).hardware_units


def _searched_tput(ft: optuna.trial.FrozenTrial) -> float:
    return float(_trial_state.read(ft).throughput_infer_per_s or 0.0)


def _candidates(study: optuna.Study, cs: ConfirmSettings) -> list[optuna.trial.FrozenTrial]:
    """Feasible measured trials, best searched figure first (at most MAX_ATTEMPTS)."""
    done = [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if (st := _trial_state.read(t)).feasible and st.throughput_infer_per_s is not None and not st.duplicate_of
    ]
    done.sort(key=lambda t: -_per_unit(t, _searched_tput(t)))
    return done[:MAX_ATTEMPTS]


# A rate ladder's values are rounded to 3 significant digits: at most 0.5% off the exact step.
LADDER_ROUNDING = 1.005


def _beats(load: LoadLevel, floor: float) -> bool:
    """Whether a load lies above floor (a load value a claim already holds at) by more than a tie:
    an arrival rate by TIE_ABOVE, a concurrency by any step."""
    return load.value > floor if load.mode == "concurrency" else load.value > floor * TIE_ABOVE


def _lower_load(t: TrialRunner, load: LoadLevel) -> LoadLevel | None:
    if load.mode == "concurrency":
        values: Sequence[float] = [float(v) for v in ladder(int(load.value), t.judge.max_concurrency)]
    else:
        values = rate_ladder(load.value, t.judge.max_rate_rps)
    below = step_below(values, load.value)
    return None if below is None else t.judge.level(below)


def _half_below(t: TrialRunner, load: LoadLevel) -> LoadLevel | None:
    """An arrival rate half a ladder step below load's (rounded as the ladder is), or None at the
    ladder's floor."""
    value = float(f"{load.value / HALF_STEP:.3g}")
    return t.judge.level(value) if MIN_RATE_RPS <= value < load.value else None


def repeat_windows(window_ms: float, cs: ConfirmSettings) -> tuple[int, int]:
    """(min, max) windows of one confirmation repeat: at least cs.min_windows, and enough for
    cs.min_repeat_s; the max leaves the same room for stability past the min as cs does."""
    least = max(cs.min_windows, math.ceil(cs.min_repeat_s * 1000.0 / max(window_ms, 1e-3) - 1e-9))
    return least, least + max(0, cs.max_windows - cs.min_windows)


def _measure_repeats(t: TrialRunner, number: int, load: LoadLevel, cs: ConfirmSettings) -> list[LevelResult]:
    measure = t.measure
    base = t.judge.spec(t.model, (load,))
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
            if (
                done.held
                or not near_edge(out, budget, cs.repeats)
                or not more_could_hold(out, budget, cs.repeats, most_runs)
            ):
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
) -> Confirmation:
    """Confirm one trial (its config already serving) at its load, stepping down at most
    `max_steps` ladder steps (None: no count; below a rate whose runs all read within the budget,
    half a step, counted half), never to a load at or below `floor`, nor to a rate within
    TIE_ABOVE of it (a rival of a pick already confirmed there: at the pick's load it could only
    tie, by noise; `floor_why` says why in the note), and not after `until` (time.monotonic();
    None: no limit)."""

    def at(level: LoadLevel) -> tuple[Confirmation, bool]:
        """The confirmation at a level, and whether its runs all read within the budget (a rate's
        next step down is then half a step)."""
        levels = _measure_repeats(t, number, level, cs)
        edge = level.mode == "request_rate" and near_edge(levels, t.s.budget, cs.repeats)
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
    if current is first:
        return first if len(notes) == 1 else dataclasses.replace(first, note="; ".join(notes))
    return dataclasses.replace(current, searched_load=load, note="; ".join(notes))


def confirm_picks(t: TrialRunner, study: optuna.Study, cs: ConfirmSettings) -> None:
    """Confirm the best trial and its rivals within reach; results go to the study's user
    attributes (read back by confirmations()). Leaves a candidate config loaded: the caller's
    ConfigGuard puts the original back. Raises ServerError when the server dies."""
    if cs.repeats <= 0:
        return
    best_held = -math.inf
    held_at: tuple[float, float] | None = None  # (load value, per-unit factor) of the best claim held
    demoted: list[tuple[optuna.trial.FrozenTrial, Confirmation]] = []
    candidates = _candidates(study, cs)
    top = _per_unit(candidates[0], _searched_tput(candidates[0])) if candidates else 0.0
    for i, ft in enumerate(candidates):
        searched = _per_unit(ft, _searched_tput(ft))
        if searched <= best_held:
            break  # cannot overtake a confirmed pick even if its reading holds in full
        # Rivals within reach of the pick are confirmed too; past them, only while none held.
        if best_held > -math.inf and (i >= cs.max_candidates or searched < (1 - cs.rivals_within) * top):
            break
        st = _trial_state.read(ft)
        searched_load = t.judge.level(st.load.value if st.load is not None else 1.0)
        load, then = _start_load(t, ft.number, searched_load)
        per_unit = _per_unit(ft, 1.0)  # 1 / the hardware units this config occupies
        floor = held_at[0] if held_at is not None and held_at[1] == per_unit else None
        if floor is not None and not _beats(load, floor):
            # At the load a pick already holds (or within TIE_ABOVE of it) a rival could only tie, by noise.
            why = f"at {load.label} it could only tie the claim held at {t.judge.level(floor).label}"
            t.emit(ConfirmSkipped(ft.number, fmt_params(st.params), why))
            continue
        conf = _confirm_candidate(t, study, ft, st, load, cs, floor=floor, then=then)
        if conf.held and conf.throughput_infer_per_s * per_unit > best_held:
            best_held = conf.throughput_infer_per_s * per_unit
            held_at = (conf.load.value, per_unit)
        elif not conf.held and conf.repeats > 0:
            demoted.append((ft, conf))
    resume_demoted(t, study, cs, demoted, best_held)


def _start_load(
    t: TrialRunner, number: int, searched: LoadLevel
) -> tuple[LoadLevel, Callable[[Confirmation], Confirmation]]:
    """Where a candidate's confirmation starts, and how its outcome is told: at its search's load,
    or, where the runner caps it (TrialRunner.confirm_cap_rps: the predicted search's trials that
    read past the request path's calibrated capacity), at that cap, marked as stepped down from
    the search's load with the reason."""
    cap_of = getattr(t, "confirm_cap_rps", None)
    cap = cap_of(number) if cap_of is not None else None
    if cap is None or searched.mode != "request_rate" or cap >= searched.value:
        return searched, lambda c: c
    # on the search's own ladder (its steps down follow it): the highest rate there at most the cap,
    # give or take the ladder's rounding to 3 significant digits (a prediction of 8947 is its 8950)
    on_ladder = [v for v in rate_ladder(searched.value, t.judge.max_rate_rps) if v <= cap * LADDER_ROUNDING]
    if not on_ladder or max(on_ladder) >= searched.value * (1 - 1e-9):
        return searched, lambda c: c
    start = t.judge.level(max(on_ladder))
    prefix = f"started at {start.label}, the request path's calibrated capacity (the search's reading is past it)"

    def told(c: Confirmation) -> Confirmation:
        note = f"{prefix}; {c.note}" if c.note else prefix
        return dataclasses.replace(c, searched_load=searched, note=note)

    return start, told


def resume_demoted(
    t: TrialRunner,
    study: optuna.Study,
    cs: ConfirmSettings,
    demoted: Sequence[tuple[optuna.trial.FrozenTrial, Confirmation]],
    best_held: float,
) -> None:
    """Take up the demoted candidates whose ladder still reaches above the best claim held (per
    hardware unit; -inf when none held): each, the highest first, from one step below the last
    load it failed, down to where it could no longer beat the best claim (and to RESUME_DOWN_TO of
    its search's load at the lowest), while --max-time allows. One that holds replaces its
    demotion and raises the bar for the rest. A candidate demoted for an error (nothing measured)
    is not taken up."""
    end = _tune_end(t)
    queue = []
    for ft, conf in demoted:
        lower = _lower_load(t, conf.load)
        per_unit = _per_unit(ft, 1.0)
        if lower is not None:
            queue.append((lower.value * per_unit, ft, conf, lower, per_unit))
    for _, ft, old, lower, per_unit in sorted(queue, key=lambda q: -q[0]):
        if lower.value * per_unit <= best_held or (end is not None and time.monotonic() >= end):
            continue
        st = _trial_state.read(ft)
        searched = old.searched_load or old.load
        floor = max(best_held / per_unit, RESUME_DOWN_TO * searched.value)
        if not _beats(lower, floor):
            continue
        why = (
            "where it could no longer beat the claim held"
            if best_held / per_unit >= RESUME_DOWN_TO * searched.value
            else f"under {RESUME_DOWN_TO:.0%} of its search's load"
        )
        reason = "once a lower claim held" if best_held > -math.inf else "as no other config held"

        conf = _confirm_candidate(
            t,
            study,
            ft,
            st,
            lower,
            cs,
            again=True,
            then=_taken_up(f"{old.note}; taken up again {reason}: ", searched),
            floor=floor,
            max_steps=None,
            until=end,
            floor_why=why,
        )
        if conf.held and conf.throughput_infer_per_s * per_unit > best_held:
            best_held = conf.throughput_infer_per_s * per_unit


def _taken_up(prefix: str, searched: LoadLevel) -> Callable[[Confirmation], Confirmation]:
    """A demoted candidate's new outcome, told after its first demotion (`prefix`) and marked as
    stepped down from its search's load."""

    def rewrite(again: Confirmation) -> Confirmation:
        tail = again.note or f"held at {again.load.label}"
        return dataclasses.replace(again, searched_load=searched, note=prefix + tail)

    return rewrite


def _confirm_candidate(
    t: TrialRunner,
    study: optuna.Study,
    ft: optuna.trial.FrozenTrial,
    st: _trial_state.TrialState,
    load: LoadLevel,
    cs: ConfirmSettings,
    again: bool = False,
    then: Callable[[Confirmation], Confirmation] = lambda c: c,
    **confirm_kw: Any,
) -> Confirmation:
    """Put one candidate's config on the server and confirm it from `load` (confirm_one's
    keywords pass through); `then` rewrites the outcome before it is stored in the study and told
    as a ConfirmDone. A config that cannot be loaded or measured is a demotion with nothing measured."""
    t.emit(ConfirmStarted(ft.number, fmt_params(st.params), load.label, cs.repeats, again=again))
    try:
        t.put_candidate(st.config_pbtxt)  # the runner's own way: one config, or every step of a pipeline
        conf = then(confirm_one(t, ft.number, load, cs, **confirm_kw))
    except (ModelLoadError, CandidateNotAppliedError, MeasurementError) as err:
        conf = then(Confirmation(False, load, 0, 0.0, 0.0, 0.0, math.inf, math.inf, note=err.one_line()))
    study.set_user_attr(f"{ATTR_PREFIX}{ft.number}", _jsonable(to_dict(conf)))
    t.emit(ConfirmDone(ft.number, conf.held, describe(conf, t.s.budget.percentile, t.s.budget.metric)))
    return conf


def _tune_end(t: TrialRunner) -> float | None:
    """When --max-time ends the tune (time.monotonic() seconds), or None without it."""
    max_time_s = getattr(t.s, "max_time_s", None)
    started = getattr(t, "started", None)
    return None if max_time_s is None or started is None else started + max_time_s


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_jsonable(v) for v in obj]
    return obj


def confirmations(study: optuna.Study) -> dict[int, Confirmation]:
    """The confirmations stored in the study, by trial number."""
    out: dict[int, Confirmation] = {}
    for key, value in study.user_attrs.items():
        if key.startswith(ATTR_PREFIX) and isinstance(value, dict):
            data = {k: (math.inf if v is None and k.startswith("latency") else v) for k, v in value.items()}
            out[int(key[len(ATTR_PREFIX) :])] = from_dict(Confirmation, data)
    return out

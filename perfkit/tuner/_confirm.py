"""Confirmation: the pick (and the rivals whose rank depends on it) re-measured before it is
claimed.

The search reads each level once, in short windows that stop as soon as the level looks on one
side of the budget, so the best of many trials is the one most favoured by noise (the winner's
curse): its figure sits on the budget's edge. Before a figure is claimed it is measured again at
the trial's load, in longer repeated runs, stepping down where it does not hold there
(perfkit.tuner._confirm_load, confirm_one); after its steps down a trial is demoted: it is never
recommended, and the trial table says why. A demoted trial whose ladder still reaches above the
best claim held later (by a config the search read lower) is resumed, one step further down at a
time while it could still beat that claim (resume_demoted): on a host whose readings swing, the
config the search read best can still hold more than the next one, a few steps down. Where none
held yet, demoted picks are taken up again before a candidate read under half their readings is
confirmed: its claim could not stop them (they go no lower than that), and it is the answer only
once they fail. Where the
candidate read with the most room at an arrival rate failed it, the others read there start a step
below it (_failed_above).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import optuna
from optuna.trial import TrialState

from perfkit.errors import CandidateNotAppliedError, MeasurementError, ModelLoadError
from perfkit.records import Confirmation, LoadLevel, from_dict, to_dict
from perfkit.tuner import _trial_state
from perfkit.tuner._claim_stats import describe
from perfkit.tuner._confirm_load import (
    TIE_ABOVE,
    ConfirmSettings,
    _beats,
    _lower_load,
    confirm_one,
    repeat_windows,
)
from perfkit.tuner._events import ConfirmDone, ConfirmSkipped, ConfirmStarted, fmt_params
from perfkit.tuner._find_load import rate_ladder
from perfkit.tuner._trial import TrialRunner

# Re-exported: the tuner's confirmation as one module to its callers and tests.
__all__ = ["TIE_ABOVE", "ConfirmSettings", "confirm_one", "confirm_picks", "confirmations", "repeat_windows",
           "resume_demoted"]  # fmt: skip

ATTR_PREFIX = "confirmation:"
MAX_ATTEMPTS = 6  # candidates confirmed at most while none holds
# A demoted candidate is taken further down to this fraction of its search's load at the lowest: one
# that holds only below it was read far off by its search.
RESUME_DOWN_TO = 0.5


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
    done.sort(key=functools.cmp_to_key(_searched_order))
    return done[:MAX_ATTEMPTS]


def _searched_rank(ft: optuna.trial.FrozenTrial) -> float:
    """A candidate's searched figure per hardware unit, negated (the lower, the better): in open
    loop the arrival rate its search held."""
    st = _trial_state.read(ft)
    if st.load is not None and st.load.mode == "request_rate":
        return -_per_unit(ft, st.load.value)
    return -_per_unit(ft, _searched_tput(ft))


def _searched_order(a: optuna.trial.FrozenTrial, b: optuna.trial.FrozenTrial) -> int:
    """Which of two candidates comes first (negative: a): the better searched figure (_searched_rank);
    among trials that held the same arrival rate, the lower latency there, where the two readings'
    own ~95% intervals tell them apart; else the one measured first. Such trials complete the rate
    alike (their throughputs differ by the arrivals' noise), and the one with the lower latency has
    the more room: the predicted search ends the trials of every config the request path bounds at
    the path's ceiling, one rate for all (tuner/_search/_request_path.py), and their throughputs there,
    within a fraction of a percent of each other, would rank them by chance. But a trial's short
    level reads its percentile within 10-25%, and where the two overlap the order the trials were
    measured in knows more: the predicted search's, best predicted first, among configs at the
    path's ceiling the most room first (a lower reading from one short level is no surer sign of
    the better config than that order)."""
    ra, rb = _searched_rank(a), _searched_rank(b)
    if ra != rb:
        return -1 if ra < rb else 1
    if _surely_below(a, b):
        return -1
    if _surely_below(b, a):
        return 1
    return a.number - b.number


def _surely_below(a: optuna.trial.FrozenTrial, b: optuna.trial.FrozenTrial) -> bool:
    """Whether a's search read its latency below b's by more than the two readings' ~95% intervals
    (their levels' latency_rel; none recorded: exact)."""
    sa, sb = _trial_state.read(a), _trial_state.read(b)
    la, lb = _searched_latency(sa), _searched_latency(sb)
    if not la < lb:
        return False
    if math.isinf(lb):
        return True
    rel_a = float(sa.metrics.get("latency_rel") or 0.0)
    rel_b = float(sb.metrics.get("latency_rel") or 0.0)
    return la * (1 + rel_a) < lb * (1 - rel_b)


# A rate ladder's values are rounded to 3 significant digits: at most 0.5% off the exact step.
LADDER_ROUNDING = 1.005


def confirm_picks(t: TrialRunner, study: optuna.Study, cs: ConfirmSettings) -> None:
    """Confirm the best trial and its rivals within reach; results go to the study's user
    attributes (read back by confirmations()). Leaves a candidate config loaded: the caller's
    ConfigGuard puts the original back. Raises ServerError when the server dies."""
    if cs.repeats <= 0:
        return
    best_held = -math.inf
    held_at: tuple[float, float] | None = None  # (load value, per-unit factor) of the best claim held
    demoted: list[tuple[optuna.trial.FrozenTrial, Confirmation]] = []
    failed: dict[tuple[float, float], optuna.trial.FrozenTrial] = {}  # see _failed_above
    candidates = _candidates(study, cs)
    top = _per_unit(candidates[0], _searched_tput(candidates[0])) if candidates else 0.0
    end = _tune_end(t)
    for i, ft in enumerate(candidates):
        searched = _per_unit(ft, _searched_tput(ft))
        if searched <= best_held:
            break  # cannot overtake a confirmed pick even if its reading holds in full
        if end is not None and time.monotonic() >= end:
            # no claim is made after the user's deadline: the rest stand on their search's reading
            why = f"--max-time {t.s.max_time_s:g} s reached: not confirmed"
            t.emit(ConfirmSkipped(ft.number, fmt_params(_trial_state.read(ft).params), why))
            break
        # Rivals within reach of the pick are confirmed too; past them, only while none held.
        if best_held > -math.inf and (i >= cs.max_candidates or searched < (1 - cs.rivals_within) * top):
            break
        if demoted and searched < RESUME_DOWN_TO * min(_per_unit(d, _searched_tput(d)) for d, _ in demoted):
            # None held, and this one read under the lowest point the demoted picks are taken down to:
            # its claim, if any, could not stop them, so they are taken up again first (a stream's
            # demoted pick read at 104 req/s waited while its 14 req/s original spent the rest of
            # --max-time on 35 s runs, and nothing was claimed); one that holds ends the confirmations
            best_held = resume_demoted(t, study, cs, demoted, best_held, beat=searched)
            demoted = []
            if searched <= best_held:
                break
        st = _trial_state.read(ft)
        searched_load = t.trial_load.level(st.load.value if st.load is not None else 1.0)
        load, then = _start_load(t, ft.number, searched_load)
        per_unit = _per_unit(ft, 1.0)  # 1 / the hardware units this config occupies
        failed_by = _failed_above(failed, load, searched_load, ft, per_unit)
        why_not = ""
        if failed_by is not None:
            stat = t.s.budget.label
            why_not = f"not at {load.label}: trial {failed_by} failed it, its {stat} there not surely higher"
            lower = _lower_load(t, load)
            if lower is None:
                t.emit(ConfirmSkipped(ft.number, fmt_params(st.params), why_not))
                continue
            load, then = lower, _started_elsewhere(why_not, searched_load)  # at the search's load: nothing told yet
        floor = held_at[0] if held_at is not None and held_at[1] == per_unit else None
        if floor is not None and not _beats(load, floor):
            # At the load a pick already holds (or within TIE_ABOVE of it) a rival could only tie, by noise.
            why = f"at {load.label} it could only tie the claim held at {t.trial_load.level(floor).label}"
            why = f"{why_not}; {why}" if why_not else why
            t.emit(ConfirmSkipped(ft.number, fmt_params(st.params), why))
            continue
        conf = _confirm_candidate(t, study, ft, st, load, cs, floor=floor, then=then, until=end)
        if failed_by is None and load == searched_load and _failed_first(conf, load):
            failed[(load.value, per_unit)] = ft
        if conf.held and conf.throughput_infer_per_s * per_unit > best_held:
            best_held = conf.throughput_infer_per_s * per_unit
            held_at = (conf.load.value, per_unit)
        elif not conf.held and conf.repeats > 0:
            demoted.append((ft, conf))
    resume_demoted(t, study, cs, demoted, best_held)


def _searched_latency(st: _trial_state.TrialState) -> float:
    return float(st.latency_us) if st.latency_us is not None else math.inf


def _failed_first(conf: Confirmation, load: LoadLevel) -> bool:
    """Whether a confirmation's runs failed the load it started at (it stepped down, or was demoted
    with runs made there)."""
    return (conf.held and conf.load.value < load.value) or (not conf.held and conf.repeats > 0)


def _failed_above(
    failed: dict[tuple[float, float], optuna.trial.FrozenTrial],
    load: LoadLevel,
    searched: LoadLevel,
    ft: optuna.trial.FrozenTrial,
    per_unit: float,
) -> int | None:
    """The trial that already failed its longer runs at the arrival rate a candidate's confirmation
    would start at, its search's own, where this candidate's search did not read the latency there
    surely lower than that trial's did (_surely_below; `failed`: (load value, per-unit factor) ->
    that trial); None where none did. Such a candidate starts a step below: where a config read
    with as much room at a rate fails there, this one would too (where the request path bounds
    several configs alike, the predicted search reads each at the path's capacity, and once the one
    read with the most room fails there, the others' longer runs at that rate only spend time)."""
    if load != searched or load.mode != "request_rate":
        return None
    seen = failed.get((load.value, per_unit))
    if seen is None:
        return None
    return None if _surely_below(ft, seen) else seen.number


def _started_elsewhere(why: str, searched: LoadLevel) -> Callable[[Confirmation], Confirmation]:
    """How the outcome of a confirmation started away from its search's load is told: marked as
    stepped down from that load, its note led by why."""

    def told(c: Confirmation) -> Confirmation:
        return dataclasses.replace(c, searched_load=searched, note=f"{why}; {c.note}" if c.note else why)

    return told


def _start_load(
    t: TrialRunner, number: int, searched: LoadLevel
) -> tuple[LoadLevel, Callable[[Confirmation], Confirmation]]:
    """Where a candidate's confirmation starts, and how its outcome is told: at its search's load,
    or, where the search caps it (Search.confirm_cap: the predicted search's trials that
    read past the request path's calibrated capacity), at that cap, marked as stepped down from
    the search's load with the reason."""
    cap = t.search.confirm_cap(number)
    if cap is None or searched.mode != "request_rate" or cap >= searched.value:
        return searched, lambda c: c
    # on the search's own ladder (its steps down follow it): the highest rate there at most the cap,
    # give or take the ladder's rounding to 3 significant digits (a prediction of 8947 is its 8950)
    on_ladder = [v for v in rate_ladder(searched.value, t.trial_load.max_rate_rps) if v <= cap * LADDER_ROUNDING]
    if not on_ladder or max(on_ladder) >= searched.value * (1 - 1e-9):
        return searched, lambda c: c
    start = t.trial_load.level(max(on_ladder))
    prefix = f"started at {start.label}, the request path's calibrated capacity (the search's reading is past it)"
    return start, _started_elsewhere(prefix, searched)


def resume_demoted(
    t: TrialRunner,
    study: optuna.Study,
    cs: ConfirmSettings,
    demoted: Sequence[tuple[optuna.trial.FrozenTrial, Confirmation]],
    best_held: float,
    *,
    beat: float | None = None,
) -> float:
    """Take up the demoted candidates whose ladder still reaches above the best claim held (per
    hardware unit; -inf when none held) and `beat` (a candidate's search reading yet to be
    confirmed, which they are taken up before): each, the highest first, from one step below the
    last load it failed, down to where it could no longer beat the best claim or that reading (and
    to RESUME_DOWN_TO of its search's load at the lowest), while --max-time allows. One that holds
    replaces its demotion and raises the bar for the rest. A candidate demoted for an error
    (nothing measured) is not taken up. Returns the best claim held then (per hardware unit)."""
    end = _tune_end(t)
    bar = best_held if beat is None else max(best_held, beat)
    queue = []
    for ft, conf in demoted:
        lower = _lower_load(t, conf.load)
        per_unit = _per_unit(ft, 1.0)
        if lower is not None:
            queue.append((lower.value * per_unit, ft, conf, lower, per_unit))
    for _, ft, old, lower, per_unit in sorted(queue, key=lambda q: -q[0]):
        if lower.value * per_unit <= bar or (end is not None and time.monotonic() >= end):
            continue
        st = _trial_state.read(ft)
        searched = old.searched_load or old.load
        floor = max(bar / per_unit, RESUME_DOWN_TO * searched.value)
        if not _beats(lower, floor):
            continue
        by = "the claim held" if bar == best_held else "the next config's search reading"
        why = (
            f"where it could no longer beat {by}"
            if bar / per_unit >= RESUME_DOWN_TO * searched.value
            else f"under {RESUME_DOWN_TO:.0%} of its search's load"
        )
        if best_held > -math.inf:
            reason = "once a lower claim held"
        else:
            reason = "as no other config held" if beat is None else "before a config read far lower is confirmed"

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
            bar = max(bar, best_held)
    return best_held


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
        conf = then(confirm_one(t, ft.number, load, cs, predicted_rps=st.predicted_rps, **confirm_kw))
    except (ModelLoadError, CandidateNotAppliedError, MeasurementError) as err:
        conf = then(Confirmation(False, load, 0, 0.0, 0.0, 0.0, math.inf, math.inf, note=err.one_line()))
    study.set_user_attr(f"{ATTR_PREFIX}{ft.number}", _jsonable(to_dict(conf)))
    t.emit(ConfirmDone(ft.number, conf.held, describe(conf, t.s.budget.percentile, t.s.budget.metric)))
    return conf


def _tune_end(t: TrialRunner) -> float | None:
    """When --max-time ends the tune (time.monotonic() seconds), or None without it."""
    max_time_s = t.s.max_time_s
    return None if max_time_s is None else t.started + max_time_s


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

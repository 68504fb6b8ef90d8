"""The predicted search (`perfkit tune --search predict`): calibrate the model on the running
server, predict every config of the space with the batcher simulator (perfkit.predict), then
let the trial runner measure the best predicted configs first; every trial's rate search starts
at its config's prediction where it has one (the original's too). Each measured trial with a
prediction is checked against it (tuner/_search/_predict_check.py), two ways, either one enough: its
sustainable rate within PREDICTION_TOLERANCE of the predicted, or, where the rate is further off,
the simulator's budget statistic at the rate measured within LATENCY_TOLERANCE of the one
measured there (near the budget a batching config's p99 is flat in the rate, so a small error in
latency moves the predicted rate far while the model is right). The best predicted config is
measured first; each next best (up to TOP_MEASURED) only while its prediction, taken up by the
most favourable measured / predicted ratio of the trials checked or by the calibration's stated
error, whichever is more (x1 at the least), could still beat the best measured rate: what the
prediction settles is not measured. While the checks hold the search stops there; where neither
holds, it says so and goes on with the measured search, seeded by the predictions already queued.
The confirmation that follows is the measured search's own. The calibration is kept in the record
however the search ends."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import TrialState

from perfkit import predict
from perfkit.records import Calibration
from perfkit.tuner import _trial_state
from perfkit.tuner._events import TuneEvent
from perfkit.tuner._search._model_calibrate import Calibrated, calibrate
from perfkit.tuner._search._predict_check import (
    LATENCY_TOLERANCE,
    PREDICTION_TOLERANCE,
    PredictionChecked,
    latency_holds,
    rate_holds,
)
from perfkit.tuner._search._predict_events import Note, Predicted, label
from perfkit.tuner._search._predict_load import latency_at_figure
from perfkit.tuner._search._predict_points import batcher_config, space_points
from perfkit.tuner._search._predict_rank import (
    measured_keys,
    prediction_bounds_original,
    queued_together,
    rank_key,
    ranked_to_measure,
    scoring_keep,
)
from perfkit.tuner._search._predict_values import score_by_value, sustainable_by_value
from perfkit.tuner._search._request_path import (
    TOP_MEASURED,
    alike_at_path_ceiling,
    at_path_ceiling,
    headroom_first,
    held_rps,
    path_bound,
)

if TYPE_CHECKING:
    from perfkit.tuner._trial import TrialRunner

log = logging.getLogger(__name__)

RANKED_KEPT = 32  # distinct configs ranked before choosing those measured (_request_path.measured_first)
SIM_REQUESTS = 6_000
PREDICTED_ATTR = "predicted_rps"  # the trial's predicted sustainable rate (a column of trials.csv)


@dataclass
class Predictor:
    """The state of a predicted search between trials (PredictedSearch asks it): what was
    predicted for which params, which trials were checked, and whether the predictions still hold."""

    t: TrialRunner
    calibration: Calibration | None = None
    checked: set[int] = field(default_factory=set)
    fell_back: bool = False
    seeded: bool = False  # predictions made: the trials' load searches start at them (load_hints)
    steer: bool = True  # a pipeline's trial may queue a neighbour: not while the predictions pick the trials
    # Where your config cannot compete with the best predicted: its load search ends at its
    # predicted rate when that holds (LoadLadder.start_suffices).
    original_at_prediction_only: bool = False
    # Every config the simulator scored to a rate (not bounded below the best): the original's
    # trial, measured anyway, is checked against its prediction too, and every trial of a config
    # in it starts its rate search at its prediction (PredictedSearch.load_hints, tuner/_search/_predicted.py).
    predicted: dict[Any, float] = field(default_factory=dict)  # key(params) -> predicted rate
    # The best predicted configs after the first, best first, (params, predicted rate): each is
    # queued only if it could still beat the best measured rate (see next_worth_measuring).
    waiting: list[tuple[dict[str, Any], float]] = field(default_factory=list)
    passed_over: str | None = None  # why the rest of `waiting` was not measured
    past_path: set[int] = field(default_factory=set)  # trials that held past the path's ceiling
    # Trials of configs the path bounds that held more than their prediction (the path's ceiling),
    # with that prediction: each one's confirmation starts there (confirm_cap), not at the trial's
    # short-level reading.
    capped: dict[int, float] = field(default_factory=dict)
    measured_before: set[Any] = field(default_factory=set)  # configs a resumed study measured (not queued again)
    # Every point of the space scored, with its predicted rate (a config not simulated at its ceiling, an upper
    # bound below the best kept): what the record's importances are computed over (tuner/_importance).
    space: list[tuple[dict[str, Any], float]] = field(default_factory=list)

    def queue(self, study: optuna.Study, top: list[tuple[dict[str, Any], float]]) -> None:
        """Queue the best predicted config now, the others (predict_space chose them) while worth it."""
        together = queued_together(self.t, top)
        self.waiting = list(top[together:])
        for params, rate in top[:together]:
            _enqueue(study, params, rate)

    def original_at_prediction(self, best_rps: float) -> None:
        """Where your config cannot compete with the best predicted (best_rps), measure it at its
        predicted rate only: a level that holds there is its figure (a lower bound) and checks the
        model; one that does not is walked down a ladder step at a time to the first level that holds
        (LoadLadder start_suffices). Said in a line."""
        mine = self.predicted_for({})
        if mine is None or not cannot_compete(mine, best_rps) or not prediction_bounds_original(self.t):
            return
        self.original_at_prediction_only = True
        self.t.emit(
            Note(
                f"your config, predicted {mine:.0f} req/s against the best {best_rps:.0f}, cannot compete even with"
                f" both off by {PREDICTION_TOLERANCE:.0%}: it is measured at its predicted rate only (a level that"
                " holds there is its figure, at least)"
            )
        )

    def prediction_of(self, st: _trial_state.TrialState) -> float | None:
        """The rate a measured trial is checked against: the one it was queued with, or for your
        config (measured anyway: its prediction is free evidence) the one predicted for it."""
        if st.predicted_rps is None and st.is_original:
            return self.predicted_for(st.params)
        return st.predicted_rps

    def reads_past_path_ceiling(self, st: _trial_state.TrialState, predicted_rps: float) -> bool:
        """Whether a trial of a config the request path bounds held more than its prediction
        (the path's calibrated ceiling, where the prediction of such a config sits)."""
        got = st.throughput_infer_per_s
        return (
            st.feasible
            and got is not None
            and float(got) > predicted_rps
            and not st.rate_is_lower_bound
            and path_bound(self.calibration, self.point_key(st.params))
        )

    def ends_at_path_ceiling(self, params: Mapping[str, Any]) -> bool:
        """Whether a point's trial ends at its predicted rate where that holds: predicted at the
        request path's ceiling (tuner/_search/_request_path.py at_path_ceiling)."""
        return at_path_ceiling(self.calibration, self.point_key(params), self.predicted_for(params))

    def confirm_cap(self, number: int) -> float | None:
        """Where a trial's confirmation starts at most: for one of a config the request path
        bounds that read more than its prediction, that prediction (the path's ceiling). A
        trial's short levels read more than the path carries over the confirmation's longer
        runs: confirming from that reading spends runs failing before the claim. None for the
        others."""
        return self.capped.get(number)

    def held_elsewhere(self, study: optuna.Study) -> float | None:
        """The rate another config holds, under which the load search of a config at the
        request path's ceiling does not go on (tuner/_search/_request_path.py held_rps)."""
        return held_rps(study, self.t.s.objective)

    def summary(self, best: int | None) -> TuneEvent | None:
        """What the predictions tell of the best trial after the search (an ensemble's bottleneck)."""
        return None

    def label(self, params: Mapping[str, Any]) -> str:
        """A point's knobs, for the search's lines."""
        return label(params)

    def next_worth_measuring(self, study: optuna.Study) -> bool:
        """Queue the next waiting config if its prediction, taken up by most_favourable, could
        still beat the best rate measured; else drop the rest (they are predicted lower still) and
        say why. True when one was queued."""
        if not self.waiting:
            return False
        ratios, best = [], 0.0
        for ft in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            st = _trial_state.read(ft)
            got = st.throughput_infer_per_s if st.feasible else None
            if got:
                best = max(best, float(got))
            want = self.prediction_of(st)
            # a lower bound tells no error, only that it is not lower; nor does a rate past the path's ceiling
            telling = not st.rate_is_lower_bound and ft.number not in self.past_path
            if ft.number in self.checked and want and got and telling:
                ratios.append(float(got) / want)
        params, rate = self.waiting[0]
        factor, why = self.most_favourable(ratios)
        # A config the request path bounds is predicted at the path's ceiling, which measurements pass as often
        # as not: the prediction cannot settle it against the best measured; a measurement does.
        could, also = self.favourable_rps(params, rate, factor)
        if could >= best or path_bound(self.calibration, self.point_key(params)):
            self.waiting.pop(0)
            _enqueue(study, params, rate)
            return True
        self.passed_over = (
            f"the next predicted, {self.label(params)} at {rate:.0f} req/s, cannot reach the best measured"
            f" {best:.0f} even x{factor:.2f} up ({why}){also}"
        )
        self.waiting = []
        return False

    def favourable_rps(self, params: Mapping[str, Any], rate_rps: float, factor: float) -> tuple[float, str]:
        """The most a waiting config predicted at rate_rps could hold, for next_worth_measuring:
        its prediction taken up by `factor` (most_favourable); and what else was tried, for the
        line that says why it was passed over (a pipeline's search adds its steps as measured)."""
        return rate_rps * factor, ""

    def most_favourable(self, ratios: list[float]) -> tuple[float, str]:
        """How far up a waiting config's prediction is taken before it is judged against the best
        measured, and why: the most favourable measured / predicted ratio of the trials checked, or
        the calibration's stated error (Calibration.stated_error_rel, the interval `perfkit plan`
        states for a predicted rate), whichever is more; x1 where neither is above.

        Not below the stated error: two configs predicted closer than it are not told apart by the
        prediction (their order can turn when measured). Not below x1: one config read below its
        prediction says nothing of the next one's error, whose sign differs as often as not."""
        stated = 1.0 + (self.calibration.stated_error_rel if self.calibration is not None else 0.0)
        seen = max(ratios, default=0.0)
        if seen > stated:
            return seen, "the most favourable error seen"
        if stated > 1.0:
            return stated, f"the calibration's stated error, {stated - 1:.0%}"
        return 1.0, "x1 at the least"

    def key(self, params: Mapping[str, Any]) -> Any:
        """What tells two points apart for the simulator (the predicted dict's key)."""
        return batcher_config(self.t, params)

    def point_key(self, params: Mapping[str, Any]) -> Any:
        """The key of a point of the space: its params over the original's."""
        return self.key({**self.t.original_fixed_params(), **params})

    def predicted_for(self, params: Mapping[str, Any]) -> float | None:
        """The rate predicted for a point (its params over the original's), None where the
        simulator did not score it to a rate (bounded below the best, or a value off its grid)."""
        return self.predicted.get(self.point_key(params))

    def latency_at_measured(self, params: Mapping[str, Any], rate_rps: float) -> float | None:
        """The simulator's budget statistic (the budget's percentile of latency) for a point offered
        the rate a trial sustained, with the calibration's service model, contention and overhead
        and the trial's arrival process; None where it cannot say (no calibration, a budget on
        TTFT/ITL, a percentile it does not keep)."""
        b = self.t.s.budget
        if self.calibration is None or b.metric != "latency":
            return None
        cfg = self.key({**self.t.original_fixed_params(), **params})
        curve = self.calibration.curve(cfg.variant)  # the curve of its precision / instance kind
        if curve is None:
            return None
        return latency_at_figure(self.t, curve, cfg, rate_rps, requests=SIM_REQUESTS)

    def checked_trial(self, number: int, st: _trial_state.TrialState, measured_rps: float | None) -> None:
        """After a trial is checked against its prediction (a pipeline's search adds its steps)."""

    def check(self, number: int, st: _trial_state.TrialState, predicted_rps: float) -> PredictionChecked:
        """A measured trial against its prediction: the rate, and where that is off, the latency
        at the rate measured (the sustainable level's offered rate, its budget statistic)."""
        got = st.throughput_infer_per_s
        measured = float(got) if st.feasible and got is not None and got > 0 else None
        b = self.t.s.budget
        if measured is not None and st.rate_is_lower_bound:  # held where predicted: consistent, nothing above measured
            return PredictionChecked(number, predicted_rps, measured, True, percentile=b.percentile,
                                     budget_metric=b.metric, lower_bound=True)  # fmt: skip
        if self.reads_past_path_ceiling(st, predicted_rps) and not rate_holds(predicted_rps, measured):
            return PredictionChecked(number, predicted_rps, measured, True, percentile=b.percentile,
                                         budget_metric=b.metric, past_path=True)  # fmt: skip
        ev = PredictionChecked(number, predicted_rps, measured, rate_holds(predicted_rps, measured),
                               percentile=b.percentile, budget_metric=b.metric)  # fmt: skip
        if ev.held or measured is None or st.latency_us is None:
            return ev
        at = st.load.value if st.load is not None and st.load.mode in ("request_rate", "trace") else measured
        simulated = self.latency_at_measured(st.params, at)
        if simulated is None:
            return ev
        pair = (simulated, float(st.latency_us))
        return dataclasses.replace(ev, held=latency_holds(pair), latency_us=pair, latency_rps=at)

    def seed(self, study: optuna.Study) -> None:
        """Calibrate, predict the space, queue the best predicted configs (the study's seed hook)."""
        if not self.run_calibration():
            return
        self.measured_before = measured_keys(study, self.point_key)
        self.seeded = True
        self.steer = False  # the predictions pick the trials while they hold
        started = time.perf_counter()
        top, configs, simulated = self.predict_space()
        self.queue(study, top)
        self.t.emit(Predicted(configs, simulated, time.perf_counter() - started,
                              tuple((label(p), rate) for p, rate in top)))  # fmt: skip
        if top:
            self.original_at_prediction(top[0][1])

    def run_calibration(self) -> bool:
        """Calibrate (sets and says self.calibration); False where the prediction cannot go on, said
        why (a stream's predictor, tuner/_search/_predict_stream.py): the measured search goes on."""
        self.calibration = calibrate(self.t)
        self.t.emit(Calibrated(self.calibration))
        return True

    def simulated_budget_us(self) -> float:
        """The end-to-end latency budget the simulator holds each config to: the tune's own (a stream's
        predictor gives the one a TTFT or ITL budget stands for, tuner/_search/_predict_stream.py)."""
        return self.t.s.budget.latency_budget_us

    def predict_space(self) -> tuple[list[tuple[dict[str, Any], float]], int, int]:
        """Score the space with the calibration: sets what was predicted for each config (your
        config's too, simulated even where bounded below the best) and returns the distinct configs
        to measure (_request_path.measured_first) with their rates, best first, how many configs
        there were and how many were simulated."""
        assert self.calibration is not None
        cal = self.calibration
        # each point with the curve of its precision / instance kind; a value not calibrated is not predicted
        points = [p for p in space_points(self.t) if cal.curve(batcher_config(self.t, p).variant) is not None]
        cfgs = [batcher_config(self.t, p) for p in points]
        keep, budget_us = scoring_keep(self.t, TOP_MEASURED), self.simulated_budget_us()
        results = score_by_value(self.t, cal, cfgs, requests=SIM_REQUESTS, keep=keep, budget_us=budget_us)
        simulated = sum(1 for r in results if not r.bounded)
        results = alike_at_path_ceiling(self.calibration, results)
        by_cfg = {r.config: r for r in results}
        self.space = [(dict(p), by_cfg[c].rate_rps) for p, c in zip(points, cfgs) if c in by_cfg]
        self.predicted = {r.config: r.rate_rps for r in results if not r.bounded and r.rate_rps > 0}
        # Your config is measured anyway: simulated even where its bound is below the best, its
        # prediction starts its rate search and checks the model at a second point.
        mine = batcher_config(self.t, self.t.original_fixed_params())
        if mine not in self.predicted:
            own = sustainable_by_value(self.t, cal, mine, requests=SIM_REQUESTS, budget_us=budget_us)
            if own is not None and own.rate_rps > 0:
                self.predicted[mine] = own.rate_rps

        def order(params: dict[str, Any]) -> tuple[float, float]:
            cfg = batcher_config(self.t, params)
            return rank_key(
                self.t, params, headroom_first(self.calibration, cfg, by_cfg[cfg].rate_rps), by_cfg[cfg].rate_rps
            )

        top: list[dict[str, Any]] = []
        for params in sorted(points, key=order):
            if len(top) >= RANKED_KEPT:
                break
            r = by_cfg[batcher_config(self.t, params)]
            if r.bounded or r.rate_rps <= 0 or any(_alike(batcher_config(self.t, q), r, by_cfg) for q in top):
                continue
            top.append(params)
        top = ranked_to_measure(self.t, self.calibration, top, points, lambda p: by_cfg[batcher_config(self.t, p)],
                                done=self.measured_before)  # fmt: skip
        best = [(p, by_cfg[batcher_config(self.t, p)].rate_rps) for p in top]
        return best, len(cfgs), simulated

    def stop(self, study: optuna.Study) -> str | None:
        """Before each trial: check the trials measured since, and stop once the best predicted
        configs are measured and held (the search's extra stop rule)."""
        for ft in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            if ft.number in self.checked:
                continue
            st = _trial_state.read(ft)
            want = self.prediction_of(st)
            if want is None:
                continue
            self.checked.add(ft.number)
            ev = self.check(ft.number, st, want)
            self.t.emit(ev)
            self.checked_trial(ft.number, st, ev.measured_rps)
            if ev.past_path:
                self.past_path.add(ft.number)
            if self.reads_past_path_ceiling(st, want):
                self.capped[ft.number] = want
            if not ev.held and not self.fell_back:
                self.fell_back = True
                self.steer = True  # the measured search goes on, steered as it is without predictions
                latency = f" and the latency at the rate measured by more than {LATENCY_TOLERANCE:.0%}"
                self.t.emit(
                    Note(
                        f"predictions are off by more than {PREDICTION_TOLERANCE:.0%}"
                        f"{latency if ev.latency_us is not None else ''}: going on with the measured search, seeded"
                        " by the configs measured so far"
                    )
                )
        pending = [
            ft
            for ft in study.get_trials(deepcopy=False, states=(TrialState.WAITING, TrialState.RUNNING))
            if PREDICTED_ATTR in ft.user_attrs
        ]
        if not self.fell_back and self.checked and not pending:
            if self.next_worth_measuring(study):
                return None
            why = f"; {self.passed_over}" if self.passed_over else ""
            return f"the best predicted configs measured ({len(self.checked)}), their predictions held{why}"
        if self.fell_back and self.waiting:  # the measured search goes on: what was predicted best goes first
            for params, rate in self.waiting:
                _enqueue(study, params, rate)
            self.waiting = []
        return None


def cannot_compete(predicted_rps: float, best_predicted_rps: float) -> bool:
    """Whether a config predicted at predicted_rps stays below the best predicted even with the first
    PREDICTION_TOLERANCE under its rate and the best PREDICTION_TOLERANCE over."""
    return predicted_rps * (1 + PREDICTION_TOLERANCE) < best_predicted_rps * (1 - PREDICTION_TOLERANCE)


def _enqueue(study: optuna.Study, params: Mapping[str, Any], rate_rps: float) -> None:
    """Queue a predicted config with its predicted rate (PREDICTED_ATTR)."""
    study.enqueue_trial(dict(params), user_attrs={PREDICTED_ATTR: rate_rps}, skip_if_exists=True)


def _alike(cfg: predict.BatcherConfig, r: predict.RateResult, by_cfg: Mapping[Any, predict.RateResult]) -> bool:
    """Whether a config adds nothing to one already picked: the same batch size, instances and
    precision / instance kind, predicted within 1% (queue delays and preferred sizes the simulator scores alike)."""
    same = (cfg.max_batch_size, cfg.instances, cfg.variant) == (r.config.max_batch_size, r.config.instances,
                                                                r.config.variant)  # fmt: skip
    return same and abs(by_cfg[cfg].rate_rps - r.rate_rps) <= 0.01 * r.rate_rps

"""The predicted search on a pipeline (`perfkit tune --search predict` on an ensemble): every step
calibrated in one run through the ensemble, each step's configs scored alone, the best few per
step (the slowest step given the most) combined and predicted end to end with the pipeline
simulator (perfkit.predict, steps fed by the departures of the steps they read from), the best
predicted sets measured first; each checked trial names the bottleneck step with its predicted
and measured time in step, and is checked by its rate alone (no latency check: the steps'
figures are shown one by one instead). A step calibrated at each precision / instance kind of its
space has its points crossed with them, each simulated with its value's curve
(tuner/_search/_predict_step_values.py). The calibration: tuner/_search/_pipeline_calibrate.py. A
BLS model and the models it calls: tuner/_search/_predict_bls.py (the same search, its calls read
from the statistics and simulated one after another).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna

from perfkit import predict
from perfkit.errors import MeasurementError
from perfkit.records import Calibration
from perfkit.tuner import _pipeline, _trial_state
from perfkit.tuner._events import TuneEvent
from perfkit.tuner._search._pipeline_calibrate import calibrate_pipeline
from perfkit.tuner._search._predict import TOP_MEASURED, Predictor
from perfkit.tuner._search._predict_events import Note, Predicted, label
from perfkit.tuner._search._predict_points import SIMULATED, dimension_values
from perfkit.tuner._search._predict_step_checks import StepCheck, StepsChecked
from perfkit.tuner._search._predict_step_values import (
    StepModels,
    curve_models,
    fastest_one_us,
    score_alone,
    step_config,
    value_points,
)
from perfkit.tuner._space import P_DB

SEP = _pipeline.SEP
PER_STEP_BEST = 3  # configs of the slowest step combined with the others'
PER_STEP_OTHERS = 2  # configs of every other step


def _points(s: _pipeline.Step, base: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every point of one step's space the simulator tells apart (its own knob names)."""
    dims = [d for d in s.space.dimensions if d.name in SIMULATED]
    points: list[dict[str, Any]] = [dict(base)]
    for d in dims:
        points = [{**p, d.name: v} for p in points for v in dimension_values(d)]
    batching_only = {d.name for d in dims if d.when_dynamic_batching}
    out, seen = [], set()
    for p in points:
        db = bool(p.get(P_DB, s.space.original_params.get(P_DB)))
        p = {k: v for k, v in p.items() if db or k not in batching_only}
        key = tuple(sorted(p.items()))
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def step_order(p: _pipeline.Pipeline) -> list[tuple[str, tuple[str, ...]]]:
    """The steps in an order where each follows those it reads from, each with those it reads
    from (its inputs' producers in the ensemble's input_map/output_map). A nested ensemble or a
    model on several steps: the steps in series, in the pipeline's order."""
    names = [s.model for s in p.steps]
    steps = list(p.original_cfg.ensemble_scheduling.step)
    if p.nested or len(steps) != len(set(st.model_name for st in steps)):
        return [(m, (names[i - 1],) if i else ()) for i, m in enumerate(names)]
    producer = {v: st.model_name for st in steps for v in st.output_map.values()}
    reads = {st.model_name: tuple(sorted({producer[v] for v in st.input_map.values() if v in producer}))
             for st in steps}  # fmt: skip
    out: list[tuple[str, tuple[str, ...]]] = []
    done: set[str] = set()
    while len(out) < len(reads):
        ready = [m for m in names if m not in done and all(r in done for r in reads.get(m, ()))]
        if not ready:  # a cycle: Triton refuses it before this; keep the listed order
            return [(m, (names[i - 1],) if i else ()) for i, m in enumerate(names)]
        out.append((ready[0], reads.get(ready[0], ())))
        done.add(ready[0])
    return out


@dataclass
class PipelinePredictor(Predictor):
    """The predicted search over a pipeline's joint space."""

    order: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    models: dict[str, StepModels] = field(default_factory=dict)  # each step's at its first value
    step_cals: dict[str, Calibration] = field(default_factory=dict)  # each step's, its values' curves in it
    by_value: dict[tuple[str, str], StepModels | None] = field(default_factory=dict)  # (step, value): its curve's
    steps_seen: dict[int, StepsChecked] = field(default_factory=dict)
    # A BLS pipeline's calls per request of each model after the first (None: an ensemble)
    fanout: tuple[int, ...] | None = None
    sim_requests: int = predict.PIPELINE_REQUESTS  # requests of each simulated run

    def calibrate(self) -> Calibration:
        """Every step calibrated (raises MeasurementError where the search falls back)."""
        return calibrate_pipeline(self.t)

    def fell_back_line(self, err: MeasurementError) -> str:
        """What is said where the calibration raised, before the measured search goes on."""
        return f"calibration failed ({err.message}): going on with the measured search"

    def step_order(self) -> list[tuple[str, tuple[str, ...]]]:
        return step_order(self.pipeline)

    def step_points(self, s: _pipeline.Step, base: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Every point of one step's space the simulator tells apart (its own knob names), at each
        value of its precision / instance kind calibrated (none the server refused)."""
        cal = self.step_cals.get(s.model)
        return value_points(s, cal, _points(s, base)) if cal is not None else _points(s, base)

    def models_at(self, model: str, variant: str) -> StepModels | None:
        """A step's service model and contention at a value of its PER_VALUE knobs: its curve's
        (Calibration.curve); None where its calibration holds no curve for that value (the server
        refused it)."""
        cal = self.step_cals.get(model)
        if cal is None:
            return self.models[model]
        if (model, variant) not in self.by_value:
            self.by_value[(model, variant)] = curve_models(cal, variant)
        return self.by_value[(model, variant)]

    def one_us(self, model: str) -> float:
        """A step's execution of one request at its fastest calibrated value."""
        cal = self.step_cals.get(model)
        return fastest_one_us(cal) if cal is not None else self.models[model][0].service_us(1)

    def scored_alone(self, s: _pipeline.Step) -> bool:
        """Whether a step's configs are scored alone before the joint product (else all of them go in)."""
        return s.searched

    def rest_us(self, model: str) -> float:
        """What a request spends at least outside `model`'s step: every other step's execution of
        one, at its fastest value."""
        return sum(self.one_us(m) for m, _ in self.order if m != model)

    def calls_of(self, model: str) -> int:
        """A step's executions of one per pipeline request (at least 1)."""
        return 1

    @property
    def sim(self) -> dict[str, Any]:
        """The keywords of every pipeline simulation of this search."""
        return {"fanout": self.fanout, "requests": self.sim_requests}

    @property
    def pipeline(self) -> _pipeline.Pipeline:
        p = self.t.subject.pipeline
        assert p is not None  # an ensemble's subject holds its pipeline
        return p

    def key(self, params: Mapping[str, Any]) -> Any:
        return tuple(self.configs(params))

    def configs(self, params: Mapping[str, Any]) -> list[predict.BatcherConfig]:
        """Each step's batcher config at a joint point, in step order (held steps as they are),
        named by the value of its precision / instance kind (step_config)."""
        per = _pipeline.split(params)
        p = self.pipeline
        return [step_config(p.step(m), per.get(m, {})) for m, _ in self.order]

    def predictable(self, configs: Sequence[predict.BatcherConfig]) -> bool:
        """Whether every step's config runs at a value its calibration holds a curve for."""
        return all(self.models_at(m, c.variant) is not None for (m, _), c in zip(self.order, configs, strict=True))

    def steps(self, configs: Sequence[predict.BatcherConfig]) -> list[predict.PipelineStep]:
        """The simulator's steps of a set of configs, each with its value's curve (predictable ones only)."""
        index = {m: i for i, (m, _) in enumerate(self.order)}
        out = []
        for (m, reads), cfg in zip(self.order, configs, strict=True):
            models = self.models_at(m, cfg.variant)
            assert models is not None  # the configs of values not calibrated are never predicted
            out.append(predict.PipelineStep(m, cfg, *models, after=tuple(index[r] for r in reads)))
        return out

    def seed(self, study: optuna.Study) -> None:
        try:
            self.calibration = self.calibrate()
        except MeasurementError as err:
            self.fell_back = True
            self.t.emit(Note(self.fell_back_line(err)))
            return
        cal = self.calibration
        self.seeded = True
        self.steer = False  # the predictions pick the trials while they hold (see Predictor.stop)
        self.order = self.step_order()
        self.models = {c.model: (predict.service_model(c), predict.contention(c)) for c in cal.steps}
        self.step_cals = {c.model: c for c in cal.steps}
        started = time.perf_counter()
        budget_us = self.t.s.budget.latency_budget_us
        base = _pipeline.split(self.t.original_fixed_params())
        # Each step alone, within the budget less what the other steps take at least.
        picks: dict[str, list[dict[str, Any]]] = {}
        best_alone: dict[str, float] = {}
        scored = 0
        for s in self.pipeline.steps:
            if not s.searched:
                picks[s.model] = [{}]
                continue
            points = self.step_points(s, base.get(s.model, {}))
            if not self.scored_alone(s):
                picks[s.model] = points
                continue
            rest = self.rest_us(s.model) + cal.overhead_us
            cfgs = [step_config(s, q) for q in points]
            alone_us = max(budget_us - rest, 0.1 * budget_us) / self.calls_of(s.model)
            results = score_alone(
                cfgs, functools.partial(self.models_at, s.model), alone_us, percentile=self.t.s.budget.percentile,
                requests=_SIM_STEP_REQUESTS, keep=PER_STEP_BEST, arrival=self.t.trial_load.distribution,
            )  # fmt: skip
            scored += len(cfgs)
            by_cfg = {r.config: r for r in results}
            pairs = sorted(((q, by_cfg[c]) for q, c in zip(points, cfgs, strict=True) if c in by_cfg), key=_by_rate)
            picks[s.model] = _distinct(pairs)
            calls = self.calls_of(s.model)
            best_alone[s.model] = max((r.rate_rps / calls for r in results if not r.bounded), default=0.0)
        # The slowest step alone gets the most configs in the joint product, the others fewer.
        slowest = min(best_alone, key=lambda m: best_alone[m]) if best_alone else None
        picks = {m: q if m == slowest else q[:PER_STEP_OTHERS] for m, q in picks.items()}
        joint = [
            _pipeline.join({m: {**base.get(m, {}), **q} for m, q in zip(picks, combo, strict=True) if q})
            for combo in itertools.product(*picks.values())
        ]
        original = dict(self.t.original_fixed_params())
        cands = [self.steps(self.configs(q)) for q in joint]
        original_steps = self.steps(self.configs(original))
        scored_sets = predict.score_pipelines(
            [*cands, original_steps], budget_us, percentile=self.t.s.budget.percentile,
            overhead_us=cal.overhead_us, keep=TOP_MEASURED, arrival=self.t.trial_load.distribution, **self.sim,
        )  # fmt: skip
        by_key = {r.configs: r for r in scored_sets}
        self.predicted = {k: r.rate_rps for k, r in by_key.items() if not r.bounded and r.rate_rps > 0}
        mine = self.key(original)  # measured anyway: simulated even below the best (see Predictor.seed)
        if mine not in self.predicted:
            own = predict.pipeline_rate(original_steps, budget_us,
                                        percentile=self.t.s.budget.percentile, overhead_us=cal.overhead_us,
                                        arrival=self.t.trial_load.distribution, **self.sim)  # fmt: skip
            if own.rate_rps > 0:
                self.predicted[mine] = own.rate_rps
        top: list[dict[str, Any]] = []
        for q in sorted(joint, key=lambda q: -by_key[self.key(q)].rate_rps):
            r = by_key[self.key(q)]
            if len(top) >= TOP_MEASURED or r.rate_rps <= 0:
                break
            if r.bounded or any(self.key(o) == self.key(q) for o in top):
                continue
            top.append(q)
        self.queue(study, [(q, by_key[self.key(q)].rate_rps) for q in top])
        seconds = time.perf_counter() - started
        best = tuple((f"{_label_joint(q)} (slowest step {by_key[self.key(q)].bottleneck})",
                      by_key[self.key(q)].rate_rps) for q in top)  # fmt: skip
        self.t.emit(Predicted(scored + len(cands), sum(1 for r in scored_sets if not r.bounded), seconds, best))
        if top:
            self.original_at_prediction(by_key[self.key(top[0])].rate_rps)

    def label(self, params: Mapping[str, Any]) -> str:
        return _label_joint(params)

    def ends_at_path_ceiling(self, params: Mapping[str, Any]) -> bool:
        """No trial of a pipeline ends at its prediction: the request path's ceiling is one model's."""
        return False

    def confirm_cap(self, number: int) -> float | None:
        """A pipeline's confirmation starts at its search's load."""
        return None

    def summary(self, best: int | None) -> TuneEvent | None:
        """The best trial's bottleneck step with its predicted and measured figures, if it was checked."""
        ev = self.steps_seen.get(best) if best is not None else None
        if ev is None:
            return None
        return Note(f"bottleneck of the best (trial {best}, at {ev.rate_rps:.0f} req/s): {ev.bottleneck_line()}")

    def favourable_rps(self, params: Mapping[str, Any], rate_rps: float, factor: float) -> tuple[float, str]:
        """A waiting pipeline config's most: its prediction taken up by `factor`, or predicted again
        with each step's execution as the trials measured it (execution_scale), whichever is more.
        A step's error moves the configs it bounds, not every config alike, and the rate-level ratios
        do not show it: the best predicted may read near its prediction while a step it does not
        lean on ran faster than calibrated, and a config that step bounds would be passed over."""
        taken_up = rate_rps * factor
        scale = self.execution_scale()
        configs = self.configs({**self.t.original_fixed_params(), **params})
        if self.calibration is None or not any(v < 1.0 for v in scale.values()) or not self.predictable(configs):
            return taken_up, ""
        steps = [
            dataclasses.replace(s, service=s.service.stretched(scale.get(s.name, 1.0))) for s in self.steps(configs)
        ]
        again = predict.pipeline_rate(steps, self.t.s.budget.latency_budget_us,
                                      percentile=self.t.s.budget.percentile, overhead_us=self.calibration.overhead_us,
                                      arrival=self.t.trial_load.distribution, **self.sim).rate_rps  # fmt: skip
        shown = ", ".join(f"{m} x{v:.2f}" for m, v in scale.items() if v < 1.0)
        return max(taken_up, again), f", nor predicted again with the executions measured ({shown}): {again:.0f} req/s"

    def execution_scale(self) -> dict[str, float]:
        """Per step, the least measured / predicted execution time the checked trials showed
        (StepsChecked: Triton's compute time against the simulator's at the rate measured), at most
        1: how much faster than calibrated each step ran, at the most favourable."""
        out: dict[str, float] = {}
        for ev in self.steps_seen.values():
            for c in ev.steps:
                if c.compute_us is not None and c.compute_us > 0 and c.predicted.mean_exec_us > 0:
                    name = c.predicted.name
                    out[name] = min(out.get(name, 1.0), c.compute_us / c.predicted.mean_exec_us)
        return out

    def latency_at_measured(self, params: Mapping[str, Any], rate_rps: float) -> float | None:
        """No latency check on a pipeline: its trials are checked by the rate, and each step's
        figures are shown next to Triton's (checked_trial)."""
        return None

    def checked_trial(self, number: int, st: _trial_state.TrialState, measured_rps: float | None) -> None:
        configs = self.configs({**self.t.original_fixed_params(), **st.params})
        if measured_rps is None or not self.models or not self.predictable(configs):
            return
        overhead_us = self.calibration.overhead_us if self.calibration else 0.0
        pred = predict.simulate_pipeline(self.steps(configs), measured_rps, overhead_us=overhead_us, **self.sim)
        checks = []
        for f in pred.steps:
            q, c, b = (st.metrics.get(f"{f.name}.{k}") for k in ("queue_us", "compute_us", "batch"))
            checks.append(StepCheck(f, q, c, b))
        ev = StepsChecked(number, measured_rps, tuple(checks))
        self.steps_seen[number] = ev
        self.t.emit(ev)


_SIM_STEP_REQUESTS = 4_000


def _by_rate(pair: tuple[dict[str, Any], predict.RateResult]) -> float:
    return -pair[1].rate_rps


def _distinct(ranked: Sequence[tuple[dict[str, Any], predict.RateResult]]) -> list[dict[str, Any]]:
    """The best PER_STEP_BEST points that differ in batch size, instances or the value of their
    precision / instance kind (or by more than 1%)."""
    out: list[tuple[dict[str, Any], predict.RateResult]] = []
    for q, r in ranked:
        if len(out) >= PER_STEP_BEST or r.bounded or r.rate_rps <= 0:
            break
        c = r.config
        if not any(
            o.config.max_batch_size == c.max_batch_size
            and o.config.instances == c.instances
            and o.config.variant == c.variant
            and abs(o.rate_rps - r.rate_rps) <= 0.01 * r.rate_rps
            for _, o in out
        ):
            out.append((q, r))
    if not out:  # nothing sustains the budget alone: the best bound still competes
        return [dict(ranked[0][0])] if ranked else [{}]
    return [q for q, _ in out]


def _label_joint(params: Mapping[str, Any]) -> str:
    per = _pipeline.split(params)
    return " | ".join(f"{m}: {label(q)}" for m, q in per.items())

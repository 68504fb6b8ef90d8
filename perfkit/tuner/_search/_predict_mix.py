"""The predicted search on a traffic mix (`perfkit tune -m A -m B --mix A:3,B:1 --search predict`):
every model calibrated alone and the contention between them measured with all of them loaded at
once (tuner/_search/_mix_calibrate.py); each model's configs scored alone at its share of the rate
within its own budget, the best few per model combined, and each combination predicted with the
models simulated together on their shared device (perfkit.predict mix_rate): the highest total
rate at the mix's weights at which every model holds its own budget, which is what a mix's trial
measures (tuner/_subject_mix.py). The best predicted are measured first, each trial checked by its
total rate (Predictor.check: no latency check, the models' figures are each their own); the stop
rule and the fallback are the one-model search's (tuner/_search/_predict.py).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import optuna

from perfkit import predict
from perfkit.errors import MeasurementError
from perfkit.records import Calibration
from perfkit.tuner import _pipeline
from perfkit.tuner._search._mix_calibrate import calibrate_mix, members, mix_of, placed, rate_priority
from perfkit.tuner._search._predict import TOP_MEASURED, Predictor
from perfkit.tuner._search._predict_events import Note, Predicted
from perfkit.tuner._search._predict_pipeline import _by_rate, _distinct, _label_joint, _points
from perfkit.tuner._search._predict_points import batcher_from
from perfkit.tuner._space._knob_rate_limit import P_RATE_LIMIT

ALONE_REQUESTS = 3_000  # each model alone at its share, to choose the few configs combined
# The best joint points at the original's rate limiter priorities that are rated again at every
# combination of the models' priorities (the rate limiter knob, tuner/_space/_knob_rate_limit.py)
RATED_WITH_PRIORITIES = 4
FULL_PRODUCT = 16  # a joint space this small is simulated whole (~3 s a point); larger, PER_STEP_BEST a model


def priority_combos(choices: Mapping[str, tuple[int, ...]]) -> list[dict[str, int]]:
    """Every combination of the models' rate limiter priorities that behaves differently: the
    limiter compares exec_count x priority (RateLimiter::ModelInstanceContext::ScaledPriority), so
    combinations alike but for a common factor of the claiming models' priorities are one (2:4 is
    1:2); 0 (no claim) is kept as it is. Models without choices are left out."""
    names = [m for m, c in choices.items() if c]
    combos: dict[tuple[float, ...], dict[str, int]] = {}
    for combo in itertools.product(*(choices[m] for m in names)):
        least = min((p for p in combo if p > 0), default=1)
        combos.setdefault(tuple(p / least for p in combo), dict(zip(names, combo, strict=True)))
    return list(combos.values())


@dataclass
class MixPredictor(Predictor):
    """The predicted search over a mix's joint space."""

    cals: dict[str, Calibration] = field(default_factory=dict)
    rated: dict[Any, float] = field(default_factory=dict)  # key(params) -> predicted total rate, once each

    def key(self, params: Mapping[str, Any]) -> Any:
        per = _pipeline.split(params)
        return tuple(
            (batcher_from(s.space.original_params, per.get(s.model, {})),
             rate_priority(s.space.original_params, per.get(s.model, {})))
            for s in mix_of(self.t).pipeline.steps
        )  # fmt: skip

    def rate(self, params: Mapping[str, Any]) -> float:
        """The predicted total rate of a joint point (its params over the original's)."""
        key = self.key({**self.t.original_fixed_params(), **params})
        if key not in self.rated:
            per = _pipeline.split({**self.t.original_fixed_params(), **params})
            assert self.calibration is not None  # rated after the calibration only
            figs = members(self.t, self.calibration, per)
            self.rated[key] = predict.mix_rate(figs, percentile=self.t.s.budget.percentile,
                                               arrival=self.t.trial_load.distribution).rate_rps  # fmt: skip
        return self.rated[key]

    def seed(self, study: optuna.Study) -> None:
        try:
            self.calibration, told = calibrate_mix(self.t)
        except MeasurementError as err:
            self.fell_back = True
            self.t.emit(Note(f"calibration failed ({err.message}): going on with the measured search"))
            return
        self.t.emit(told)
        self.seeded = True
        self.steer = False  # the predictions pick the trials while they hold (see Predictor.stop)
        self.cals = {c.model: c for c in self.calibration.steps}
        started = time.perf_counter()
        joint, scored = self.candidates()
        rated: dict[Any, tuple[dict[str, Any], float]] = {}
        for q in joint:
            k = self.key(q)
            if k not in rated:
                rated[k] = (q, self.rate(q))
        self.predicted = {k: r for k, (_, r) in rated.items() if r > 0}
        original = dict(self.t.original_fixed_params())  # measured anyway: its prediction checks the model too
        if self.key(original) not in rated and (mine := self.rate(original)) > 0:
            self.predicted[self.key(original)] = mine
        ranked = sorted(rated.values(), key=lambda qr: -qr[1])
        top = [(q, r) for q, r in ranked if r > 0][:TOP_MEASURED]
        self.queue(study, top)
        seconds = time.perf_counter() - started
        self.t.emit(Predicted(scored + len(rated), len(rated), seconds, tuple((self.label(q), r) for q, r in top)))
        if top:
            self.original_at_prediction(top[0][1])

    def candidates(self) -> tuple[list[dict[str, Any]], int]:
        """The joint points predicted together: every combination of the models' points where
        there are at most FULL_PRODUCT, else each model's best few scored alone at its share
        (its own budget, its device fraction as its instances' contention); with how many
        configs were scored alone."""
        subject = mix_of(self.t)
        base = _pipeline.split(self.t.original_fixed_params())
        per: dict[str, list[dict[str, Any]]] = {
            s.model: (_points(s, base.get(s.model, {})) if s.searched else [{}]) for s in subject.pipeline.steps
        }
        scored = 0
        if math.prod(len(v) for v in per.values()) > FULL_PRODUCT:
            b = self.t.s.budget
            assert self.calibration is not None  # candidates follow the calibration
            part = {m.name: m.device_fraction for m in placed(self.calibration, ())}
            for s in subject.pipeline.steps:
                if not s.searched:
                    continue
                cfgs = [batcher_from(s.space.original_params, q) for q in per[s.model]]
                results = predict.score_space(
                    cfgs, predict.service_model(self.cals[s.model]), subject.member_budget(s.model).latency_budget_us,
                    percentile=b.percentile, contention=predict.Contention(part[s.model]),
                    requests=ALONE_REQUESTS, arrival=self.t.trial_load.distribution,
                )  # fmt: skip
                scored += len(cfgs)
                by_cfg = {r.config: r for r in results}
                pairs = sorted(zip(per[s.model], [by_cfg[c] for c in cfgs], strict=True), key=_by_rate)
                per[s.model] = _distinct(pairs)
        joint = [
            _pipeline.join({m: {**base.get(m, {}), **q} for m, q in zip(per, combo, strict=True) if q})
            for combo in itertools.product(*per.values())
        ]
        return self.with_priorities(joint), scored

    def with_priorities(self, joint: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The rate limiter's priorities over the joint points: the RATED_WITH_PRIORITIES best at
        the original's priorities, each at every distinct combination of the models' priorities
        (the scaled priority is a ratio, so 2:4 is 1:2's); the joint as it was where no model's
        priority is searched."""
        subject = mix_of(self.t)
        choices = {s.model: (d.choices if (d := s.space.dimension(P_RATE_LIMIT)) is not None and s.searched else ())
                   for s in subject.pipeline.steps}  # fmt: skip
        if not any(choices.values()):
            return joint
        ranked = sorted(joint, key=lambda q: -self.rate(q))[:RATED_WITH_PRIORITIES]
        out = list(joint)
        for q in ranked:
            for pri in priority_combos(choices):
                out.append({**q, **_pipeline.join({m: {P_RATE_LIMIT: p} for m, p in pri.items()})})
        return out

    def label(self, params: Mapping[str, Any]) -> str:
        return _label_joint(params)

    def ends_at_path_ceiling(self, params: Mapping[str, Any]) -> bool:
        """No mix's trial ends at its prediction: the request path's ceiling is one model's."""
        return False

    def confirm_cap(self, number: int) -> float | None:
        """A mix's confirmation starts at its search's load."""
        return None

    def latency_at_measured(self, params: Mapping[str, Any], rate_rps: float) -> float | None:
        """No latency check on a mix: each model holds its own budget, the trial is checked by its
        total rate."""
        return None

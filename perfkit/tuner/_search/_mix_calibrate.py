"""The calibration of a traffic mix for the predicted search (tuner/_search/_predict_mix.py): each
model of the mix calibrated alone by the one-model calibration (tuner/_search/_model_calibrate.py
calibrate, on that model as a subject of its own, held to its own budget), then one level with
every model loaded at once, at the mix's weights, to measure the contention between them.

Why a level together: models whose instances share a device stretch each other's executions, by
an amount no model's calibration alone can tell (they may run on different GPUs, or share one
CPU). As the one-model calibration reads its instances' shared fraction from saturated rates at
two instance counts, this reads each model's part on a device the models share from how much
longer the models' executions ran next to each other than alone (Triton's per-batch-size
execution times during the level against each model's calibrated line), fitted by the mix
simulator (perfkit.predict fit_device_fractions: one figure scaling each model's own instances'
shared fraction where its calibration measured one, else its whole execution). The level runs
the models' original configs in open loop at JOINT_DEVICE_LOAD of what the device could do if
every execution ran wholly on it.

The record: the mix's Calibration names the mix's first model, `steps` holds each model's own
calibration with its shared_fraction replaced by the part of its executions on the device every
instance of the mix shares (its own instance counts' saturated rates are kept as measured).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

from perfkit import predict
from perfkit.errors import MeasurementError
from perfkit.records import Calibration, LoadLevel
from perfkit.tuner._events import TuneEvent
from perfkit.tuner._search._model_calibrate import Calibrated, _level, _spec, calibrate, check_predictable
from perfkit.tuner._search._predict_points import batcher_from
from perfkit.tuner._subject_mix import MixSubject
from perfkit.tuner._trial import TrialRunner, trial_load_of

JOINT_DEVICE_LOAD = 0.5  # the level together: this much of the device, were every execution on it alone
JOINT_LEVEL_S = 3.0  # one window this long: the heaviest model's executions are few at its share


@dataclass(frozen=True)
class MixCalibrated(TuneEvent):
    """Each model's calibration, and what the level together told of their contention."""

    cal: Calibration
    rate_rps: float
    stretch: tuple[float, ...]

    def line(self) -> str:
        rows = [f"  {c.model}: {Calibrated(c).line()}" for c in self.cal.steps]
        together = ", ".join(
            f"{c.model} x{s:.2f} as long as alone (on the shared device {c.shared_fraction:.0%} of each execution)"
            for c, s in zip(self.cal.steps, self.stretch, strict=True)
        )
        return (
            f"calibrated the mix's {len(self.cal.steps)} models in {self.cal.duration_s:.0f} s:\n"
            + "\n".join(rows)
            + f"\n  together at {self.rate_rps:.0f} req/s, their executions ran {together}"
        )


def member_runner(t: TrialRunner, model: str) -> TrialRunner:
    """A runner over one model of the mix alone (its own budget, no mix), on the same server,
    measurement and events: what calibrate() runs on."""
    subject = mix_of(t)
    sub = subject.member(model)
    s = dataclasses.replace(t.s, model=model, mix=(), budget=subject.member_budget(model))
    return TrialRunner(t.server, s, sub, t.inner_measure, t.on_event, search=t.search,
                       trial_load=trial_load_of(t.server, s, sub))  # fmt: skip


def mix_of(t: TrialRunner) -> MixSubject:
    """The runner's subject as a mix (the predicted search of a mix runs on no other)."""
    subject = t.subject
    assert isinstance(subject, MixSubject)  # predicted_search makes the mix's predictor for a mix only
    return subject


def members(t: TrialRunner, cals: dict[str, Calibration], params: dict[str, dict[str, Any]],
            fractions: dict[str, float]) -> list[predict.MixMember]:  # fmt: skip
    """The mix's models for the simulator at one point (`params`: each model's own knobs over its
    original's), each with its calibrated service model and its part on the shared device."""
    subject = mix_of(t)
    out = []
    for s in subject.pipeline.steps:
        cfg = batcher_from(s.space.original_params, params.get(s.model, {}))
        budget_us = subject.member_budget(s.model).latency_budget_us
        out.append(
            predict.MixMember(s.model, cfg, predict.service_model(cals[s.model]), float(subject.weights[s.model]),
                              fractions.get(s.model, 0.0), budget_us)
        )  # fmt: skip
    return out


def calibrate_mix(t: TrialRunner) -> tuple[Calibration, MixCalibrated]:
    """Every model of the mix calibrated alone (calibrate, each on its own runner, its config put
    back after), then the originals loaded together at the mix's weights for one level; each
    model's part on the shared device fitted to how its executions stretched there. Raises
    UsageError for a load the prediction does not model, MeasurementError when a model executed
    nothing together, and what measuring raises."""
    check_predictable(t.trial_load)
    subject = mix_of(t)
    started = time.monotonic()
    names = [s.model for s in subject.pipeline.steps]
    cals = {m: calibrate(member_runner(t, m)) for m in names}
    total_w = float(sum(subject.weights[m] for m in names))
    share = {m: subject.weights[m] / total_w for m in names}
    alone = {m: predict.service_model(cals[m]) for m in names}
    # The originals are served again (each calibration put its model's config back).
    s_per_req = sum(share[m] * alone[m].service_us(1) / 1e6 for m in names)
    rate = min(t.trial_load.max_rate_rps, JOINT_DEVICE_LOAD / s_per_req) if s_per_req > 0 else t.trial_load.max_rate_rps
    dist: Any = t.trial_load.distribution  # "poisson" or "constant", as TrialLoadSettings.level passes it
    spec = dataclasses.replace(_spec(t, 1), levels=(LoadLevel("request_rate", float(rate), dist),), mix=t.s.mix,
                               measurement_interval_ms=JOINT_LEVEL_S * 1e3)  # fmt: skip
    before = {m: t.server.model_stats(m) for m in names}
    level = _level(t, spec)
    after = {m: t.server.model_stats(m) for m in names}
    stretch = []
    for m in names:
        points = predict.batch_points(before[m], after[m], m)
        want = sum(p.executions * alone[m].service_us(p.batch_size) for p in points)
        if want <= 0:
            raise MeasurementError(f"calibration: {m!r} executed nothing while the mix ran together",
                                   hint="check that every model of the mix answers")  # fmt: skip
        stretch.append(max(1.0, sum(p.executions * p.service_us for p in points) / want))
    originals: dict[str, dict[str, Any]] = {s.model: {} for s in subject.pipeline.steps}
    at_level = members(t, cals, originals, {})
    offered = level.throughput_infer_per_s or rate
    own = [cals[m].shared_fraction if cals[m].instance_counts else 1.0 for m in names]
    fitted = predict.fit_device_fractions(at_level, offered, stretch, own=own)
    fractions = dict(zip(names, fitted, strict=True))
    steps = tuple(dataclasses.replace(cals[m], shared_fraction=fractions[m]) for m in names)
    cal = Calibration(
        model=t.model, points=(), fixed_us=0.0, per_item_us=0.0,
        fit_rms_rel=max(c.fit_rms_rel for c in steps), fit_max_rel=max(c.fit_max_rel for c in steps),
        duration_s=time.monotonic() - started, steps=steps,
    )  # fmt: skip
    return cal, MixCalibrated(cal, rate, tuple(stretch))

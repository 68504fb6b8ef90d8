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
simulator (perfkit.predict fit_mix_contention: one figure g scaling each model's own instances'
shared fraction where its calibration measured one, else its whole execution; g = 0 where no
model's executions stretched: each model then runs on a device of its own). The level runs
the models' original configs in open loop at JOINT_DEVICE_LOAD of what the device could do if
every execution ran wholly on it.

The record: the mix's Calibration names the mix's first model, `steps` holds each model's own
calibration as calibrate() made it, and its shared_fraction is g, how much the models share one
device (0: none).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from perfkit import predict
from perfkit.errors import MeasurementError
from perfkit.records import Calibration, LoadLevel
from perfkit.tuner._events import TuneEvent
from perfkit.tuner._search._model_calibrate import Calibrated, _level, _spec, calibrate, check_predictable
from perfkit.tuner._search._predict_points import batcher_from
from perfkit.tuner._space._knob_rate_limit import P_RATE_LIMIT
from perfkit.tuner._subject_mix import MixSubject
from perfkit.tuner._trial import TrialRunner
from perfkit.tuner._trial_load import trial_load_of

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
        ran = ", ".join(f"{c.model} x{s:.2f}" for c, s in zip(self.cal.steps, self.stretch, strict=True))
        g = self.cal.shared_fraction
        if g > 0:
            parts = ", ".join(f"{m.name} {m.device_fraction:.0%}" for m in placed(self.cal, ()))
            told = f"one device shared by the models (of each execution on it: {parts})"
        else:
            told = "each model on a device of its own"
        return (
            f"calibrated the mix's {len(self.cal.steps)} models in {self.cal.duration_s:.0f} s:\n"
            + "\n".join(rows)
            + f"\n  together at {self.rate_rps:.0f} req/s their executions ran {ran} as long as alone: {told}"
        )


def own_parts(cal: Calibration) -> tuple[list[float], list[float]]:
    """Each model's own instances' shared fraction: as the mix's contention scales it, and alone.
    Scaled: where its calibration found its instances sharing (above 0), else 1 (the whole
    execution): two instance counts that scaled fully tell only that at most 1/c of an execution
    is shared (perfkit.predict fit_shared_fraction), not that none is. Alone: as calibrated."""
    return ([c.shared_fraction if c.shared_fraction > 0 else 1.0 for c in cal.steps],
            [c.shared_fraction for c in cal.steps])  # fmt: skip


def placed(cal: Calibration, mix: Sequence[predict.MixMember]) -> list[predict.MixMember]:
    """The mix's models on their devices as the calibration says (perfkit.predict shared_device):
    `mix` each model's member at a point (its device fraction to be set), or none for the
    calibration's own (at batch 1, for its line)."""
    if not mix:
        mix = [predict.MixMember(c.model, predict.BatcherConfig(), predict.service_model(c), 1.0, 0.0, 1.0)
               for c in cal.steps]  # fmt: skip
    scaled, alone = own_parts(cal)
    g = cal.shared_fraction
    return predict.shared_device(mix, g, scaled if g > 0 else alone)


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


def members(t: TrialRunner, cal: Calibration, params: dict[str, dict[str, Any]]) -> list[predict.MixMember]:
    """The mix's models for the simulator at one point (`params`: each model's own knobs over its
    original's), each with its calibrated service model, on its device as the calibration says."""
    subject = mix_of(t)
    cals = {c.model: c for c in cal.steps}
    out = []
    for s in subject.pipeline.steps:
        cfg = batcher_from(s.space.original_params, params.get(s.model, {}))
        budget_us = subject.member_budget(s.model).latency_budget_us
        out.append(predict.MixMember(s.model, cfg, predict.service_model(cals[s.model]),
                                     float(subject.weights[s.model]), 0.0, budget_us,
                                     rate_limit_priority=rate_priority(s.space.original_params,
                                                                       params.get(s.model, {}))))  # fmt: skip
    return placed(cal, out)


def rate_priority(original: dict[str, Any], params: dict[str, Any]) -> int:
    """The priority of a model's rate limiter claim at a point (0: none), over its original's."""
    return int(params.get(P_RATE_LIMIT, original.get(P_RATE_LIMIT, 0)))


def calibrate_mix(t: TrialRunner) -> tuple[Calibration, MixCalibrated]:
    """Every model of the mix calibrated alone (calibrate, each on its own runner, its config put
    back after), then the originals loaded together at the mix's weights for one level; each
    how much the models share one device fitted to how their executions stretched there. Raises
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
    steps = tuple(cals[m] for m in names)
    cal = Calibration(
        model=t.model, points=(), fixed_us=0.0, per_item_us=0.0,
        fit_rms_rel=max(c.fit_rms_rel for c in steps), fit_max_rel=max(c.fit_max_rel for c in steps),
        steps=steps,
    )  # fmt: skip
    originals: dict[str, dict[str, Any]] = {m: {} for m in names}
    at_level = members(t, cal, originals)
    offered = level.throughput_infer_per_s or rate
    g = predict.fit_mix_contention(at_level, offered, stretch, own=own_parts(cal)[0], arrival=dist)
    cal = dataclasses.replace(cal, shared_fraction=g, duration_s=time.monotonic() - started)
    return cal, MixCalibrated(cal, rate, tuple(stretch))

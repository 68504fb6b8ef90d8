"""The calibration of a BLS pipeline for the predicted search (tuner/_search/_predict_bls.py): the
BLS model loaded through itself to read its calls and its own time from the server's statistics
(tuner/_search/_bls_calls.py), and each model it calls calibrated on its own as an ensemble's
steps are (tuner/_search/_pipeline_calibrate.py).

Why the called models are loaded directly: a BLS model's calls are one after another, so a
called model sees at most one call per BLS instance at a time, and a run through the BLS model at
one instance forms batches of one only; its batch sizes 1, 2, 4, ... up to its largest
max_batch_size are formed by that many closed-loop clients on the model itself (as one model's
calibration does). The budget: BLS_CLIENTS levels through the BLS model, plus (1 + log2 of its
largest max_batch_size) levels per called model whose space batches, plus 2 per called model with
two instance counts, each CALIBRATION_LEVEL_S (plus its warm-up) and one reload per config change.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from perfkit import predict
from perfkit.errors import MeasurementError
from perfkit.records import Calibration, CalibrationPoint
from perfkit.tuner._events import TuneEvent
from perfkit.tuner._search._bls_calls import BlsCalls, BlsLevel, read_calls
from perfkit.tuner._search._model_calibrate import _level, _overhead_us, _spec, check_predictable
from perfkit.tuner._search._pipeline_calibrate import (
    SEP,
    PipelineCalibrated,
    batching_point,
    calibrating,
    step_calibration,
    step_contention,
    step_values,
    whole_calibration,
)
from perfkit.tuner._search._predict_points import dimension_values
from perfkit.tuner._space import P_COUNT, P_DB, pow2_sizes
from perfkit.tuner._trial import TrialRunner

BLS_CLIENTS = (1, 2, 4)  # closed-loop clients of the levels through the BLS model


class CallsUntold(MeasurementError):
    """The BLS model's calls cannot be simulated (a fan-out that moves, or calls that overlap)."""


@dataclass(frozen=True)
class BlsCalibrated(TuneEvent):
    """Each model's fitted service model, and the calls read."""

    cal: Calibration
    calls: BlsCalls
    levels: int

    def line(self) -> str:
        return PipelineCalibrated(self.cal, self.levels).line() + f"\n  {self.cal.model}: {self.calls.line()}"


def calibrate_bls(t: TrialRunner) -> tuple[Calibration, BlsCalls]:
    """The BLS model at one instance, without dynamic batching (each execution one request),
    loaded by BLS_CLIENTS closed-loop clients: the calls and the BLS model's own time read from
    each level's statistics, the overhead outside it at one client; then each called model
    whose space batches loaded on its own at its largest max_batch_size with a wide queue delay
    by 1, 2, 4, ... clients, and its saturated rates at its two smallest instance counts; then
    each called model at each other precision / instance kind of its space, on its own. The
    BLS model's own time is its one-request calibration point (the simulator runs it once a
    request). Every config is put back after. Raises CallsUntold where the calls cannot be
    simulated (after putting the configs back), UsageError for a load the prediction does not
    model, MeasurementError when a model executed nothing, and what measuring raises."""
    check_predictable(t.trial_load)
    subject = t.subject
    p = subject.pipeline
    assert p is not None and p.kind == "bls"  # a BLS subject holds its pipeline
    started = time.monotonic()
    bls, called = p.model, [s.model for s in p.steps[1:]]
    point, tops, counted = batching_point(t, p.searched_steps)
    counted.pop(bls, None)  # its instances each hold a request through its calls: no contention read
    through = dict(t.original_fixed_params())
    through.update({k: v for k, v in point.items() if k.endswith(SEP + P_COUNT)})  # one instance each
    bls_step = p.step(bls)
    db = next((d for d in bls_step.space.dimensions if d.name == P_DB), None) if bls_step.searched else None
    if db is not None and False in dimension_values(db):
        through[f"{bls}{SEP}{P_DB}"] = False
    batching = [m for m in called if tops.get(m, 0) > 1 and point.get(f"{m}{SEP}{P_DB}") is True]
    names = [bls, *called]
    levels: list[BlsLevel] = []
    formed: dict[str, tuple[CalibrationPoint, ...]] = {}
    with calibrating(t):
        t.put_candidate(subject.candidate(through, is_original=False, number=-1).text)
        before = {m: t.server.model_stats(m) for m in names}
        light = None
        for n in BLS_CLIENTS:
            lv = _level(t, _spec(t, n))
            light = light or lv
            stats = {c.model: c for c in lv.server.composing} if lv.server is not None else {}
            if lv.server is not None:
                stats[bls] = lv.server
            levels.append(BlsLevel(f"{n} client{'s' if n > 1 else ''}", stats))
        after = {m: t.server.model_stats(m) for m in names}
        calls = read_calls(bls, called, levels)
        if calls.fanout is None:
            raise CallsUntold(calls.why_untold or "the calls were not told")
        runs = len(BLS_CLIENTS)
        if batching:
            t.put_candidate(subject.candidate(point, is_original=False, number=-1).text)
        for m in batching:
            first = t.server.model_stats(m)
            for n in pow2_sizes(tops[m]):
                _level(t, dataclasses.replace(_spec(t, n), model=m))
                runs += 1
            formed[m] = predict.batch_points(first, t.server.model_stats(m), m)
        contention, more = step_contention(t, point, counted)
        runs += more
        assert light is not None
        requests = light.server.request_count if light.server is not None else 1
        steps = [predict.calibration(bls, (CalibrationPoint(1, max(1, requests), max(calls.own_us, 1.0)),))]
        for m in called:
            loaded = contention.get(m, ([], [], ()))[2]
            points = predict.merge_points(predict.batch_points(before[m], after[m], m), formed.get(m, ()), loaded)
            cal = step_calibration(m, points, contention)
            if p.step(m).searched:  # each other precision / instance kind of its space, loaded on the model itself
                cal, more = step_values(t, p.step(m), cal, point, tops.get(m, 0), counted.get(m, []), on_step=True)
                runs += more
            steps.append(cal)
    cal = whole_calibration(p.model, steps, _overhead_us(light), started)
    t.emit(BlsCalibrated(cal, calls, runs))
    return cal, calls

"""An ensemble's steps calibrated at each precision their spaces hold
(tuner/_search/_pipeline_calibrate.py step_values) and predicted with each value's curve
(tuner/_search/_predict_step_values.py): on a stand-in server whose per-model statistics follow a
known service model per step and precision, stage_infer's fp16 is confirmed a factor of its fp32
curve at two levels through the ensemble and named in the calibration's line, and the best
predicted runs it at fp16; a value the server refuses is said and never predicted; the pipeline
predictor simulates a config at fp16 with its own curve (a higher rate where the step is the
bottleneck)."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from perfkit import predict
from perfkit.errors import ModelLoadError
from perfkit.gate.synthetic import synthetic_level, synthetic_record
from perfkit.records import Budget, Calibration, CalibrationPoint, ProfileSpec, RunRecord, TuneRecord
from perfkit.tuner import TuneSettings, TuneSpace, _pipeline, parse_max_output_diff, tune
from perfkit.tuner._events import TuneEvent
from perfkit.tuner._search._pipeline_calibrate import PipelineCalibrated
from perfkit.tuner._search._predict_events import Predicted
from perfkit.tuner._search._predict_pipeline import PipelinePredictor
from perfkit.tuner._search._value_calibrate import ValueSkipped
from tests.conftest import copy_models
from tests.support.stand_in_server import StandInRoute, StandInServer

STEPS = ("stage_decode", "stage_infer", "stage_post")
TOP = 8  # the ensemble's max_batch_size, every step's
FP16 = 0.5  # the stand-in's fp16 runs stage_infer this factor of fp32's
# Each step's execution of a batch of n: fixed + per item n (us); stage_infer the heavy step.
COSTS_US = {"stage_decode": (6_000.0, 200.0), "stage_infer": (30_000.0, 1_000.0), "stage_post": (300.0, 20.0)}
PRECISION = 'parameters: { key: "precision" value: { string_value: "fp32" } }\n'
SPACE = TuneSpace(max_batch_sizes=(TOP,), instance_counts=(1,), queue_delay_us=(2000, 2000),
                  preferred_batch_sizes=("none",))  # fmt: skip


def _repo(tmp_path: Path) -> Path:
    """The ensemble with precision on stage_infer alone (its own parameter)."""
    repo = copy_models(tmp_path, ["stages", *STEPS])
    cfg = repo / "stage_infer" / "config.pbtxt"
    cfg.write_text(cfg.read_text() + PRECISION)
    return repo


class _Steps(StandInServer):
    """A stand-in whose statistics are each step's own: the batches the levels executed on it, at
    its known cost for the precision it is served at; `refuse_fp16`: stage_infer at fp16 does not load."""

    def __init__(self, refuse_fp16: bool = False) -> None:
        super().__init__()
        self.refuse_fp16 = refuse_fp16
        self.texts: dict[str, str] = {}  # step -> the config text it serves
        self.rows: dict[str, dict[int, list[float]]] = {}  # step -> batch size -> [executions, ns]

    def served(self, text: str) -> None:
        found = re.search(r'^name: "(\w+)"', text, flags=re.M)
        assert found is not None
        if self.refuse_fp16 and found.group(1) == "stage_infer" and self.at_fp16(text):
            raise ModelLoadError("model 'stage_infer' failed to load: precision fp16 refused by the stand-in")
        self.texts[found.group(1)] = text

    @staticmethod
    def at_fp16(text: str) -> bool:
        return re.search(r'key: "precision"\s*value: \{\s*string_value: "fp16"', text) is not None

    def run(self, model: str, batch: int, executions: int) -> None:
        fixed, per = COSTS_US[model]
        us = (fixed + per * batch) * (FP16 if self.at_fp16(self.texts.get(model, "")) else 1.0)
        row = self.rows.setdefault(model, {}).setdefault(batch, [0, 0.0])
        row[0] += executions
        row[1] += executions * us * 1e3

    def model_stats(self, name: str = "") -> dict[str, Any]:
        rows = [
            {"batch_size": b, **{k: {"count": int(n), "ns": int(ns) if k == "compute_infer" else 0}
                                 for k in ("compute_input", "compute_infer", "compute_output")}}
            for b, (n, ns) in sorted(self.rows.get(name, {}).items())
        ]  # fmt: skip
        return {"model_stats": [{"name": name, "batch_stats": rows}]}


class _Measure:
    """Closed-loop calibration levels through the ensemble: N clients one batch of N on every step
    that batches (N executions of one where it does not); the first trial's level ends the tune."""

    def __init__(self, server: _Steps) -> None:
        self.server = server
        self.levels: list[tuple[str, bool, float]] = []  # (model loaded, stage_infer at fp16, clients)

    def __call__(self, server: Any, spec: ProfileSpec, **kw: Any) -> RunRecord:
        if spec.max_trials != 1:
            raise KeyboardInterrupt  # a trial: the calibration and the prediction are over
        lv = spec.levels[0]
        assert lv.mode == "concurrency", lv  # the pipeline's calibration levels are closed loop
        clients = int(lv.value)
        self.levels.append((spec.model, self.server.at_fp16(self.server.texts.get("stage_infer", "")), lv.value))
        for m in STEPS if spec.model == "stages" else (spec.model,):
            if "dynamic_batching" in self.server.texts.get(m, ""):
                self.server.run(m, min(clients, TOP), 100)
            else:
                self.server.run(m, 1, 100 * clients)
        return synthetic_record([synthetic_level(concurrency=clients, latency_ms=50.0, noise=0.0)], model=spec.model)


def _tune(tmp_path: Path, *, refuse_fp16: bool = False) -> tuple[Calibration, _Measure, list[TuneEvent]]:
    out = tmp_path / "out"
    settings = TuneSettings(model="stages", budget=Budget(200.0, 99.0), search="predict", trials=3, output_dir=out,
                            confirm_repeats=0, max_output_diff=parse_max_output_diff("off"))  # fmt: skip
    server = _Steps(refuse_fp16)
    measure, events = _Measure(server), []
    with pytest.raises(KeyboardInterrupt):
        tune(server, settings, SPACE, model_repository=_repo(tmp_path), measure=measure,
             route=StandInRoute(server.served), on_event=events.append)  # fmt: skip
    cal = TuneRecord.load(out / "tune.json").calibration
    assert cal is not None and [s.model for s in cal.steps] == list(STEPS)
    return cal, measure, events


def test_a_steps_precision_is_calibrated_through_the_ensemble_as_a_factor_and_the_best_predicted_runs_it(tmp_path):
    cal, measure, events = _tune(tmp_path)
    decode, infer, post = cal.steps
    assert (decode.value, decode.values, post.values) == ("", (), ())  # no precision searched on them
    assert infer.value == "precision=fp32" and [c.value for c in infer.values] == ["precision=fp16"]
    fp16 = infer.values[0]
    assert fp16.factor == pytest.approx(FP16, rel=0.01)
    assert (fp16.fixed_us, fp16.per_item_us) == pytest.approx((infer.fixed_us * FP16, infer.per_item_us * FP16))
    # fp16 at the smallest and the largest batch only, both through the ensemble
    assert [(m, n) for m, at_fp16, n in measure.levels if at_fp16] == [("stages", 1), ("stages", TOP)]
    line = next(e for e in events if isinstance(e, PipelineCalibrated)).line()
    assert re.search(r"^  stage_infer at precision=fp32: 30\.00 ms \+ 1\.000 ms per item", line, flags=re.M), line
    assert re.search(r"^    precision=fp16: x0\.50 the first curve, confirmed at batch:ms 1:15\.50ms, 8:19\.00ms",
                     line, flags=re.M), line  # fmt: skip
    assert re.search(r"^  stage_decode: ", line, flags=re.M), line  # a step at one value: its line as before
    # stage_infer is the bottleneck: the best predicted runs it at fp16
    predicted = next(e for e in events if isinstance(e, Predicted))
    assert predicted.best and "precision=fp16" in predicted.best[0][0].split("stage_infer: ")[1], predicted.line()


def test_a_value_the_server_refuses_is_said_and_none_of_its_configs_is_predicted(tmp_path):
    cal, _, events = _tune(tmp_path, refuse_fp16=True)
    infer = cal.steps[1]
    assert infer.value == "precision=fp32" and infer.values == () and infer.curve("precision=fp16") is None
    skipped = [e for e in events if isinstance(e, ValueSkipped)]
    assert [(e.step, e.value) for e in skipped] == [("stage_infer", "precision=fp16")]
    assert skipped[0].line().startswith("calibration: stage_infer at precision=fp16 not calibrated (the server refused")
    predicted = next(e for e in events if isinstance(e, Predicted))
    assert predicted.best and not any("precision=fp16" in name for name, _ in predicted.best), predicted.line()


def _step(model: str, *, fp16: bool | None) -> Calibration:
    """A step's calibration at its known costs: at no value (fp16 None), or at fp32 with fp16 its
    curve times FP16 (True) or refused (False)."""
    fixed, per = COSTS_US[model]
    points = tuple(CalibrationPoint(n, 100, fixed + per * n) for n in (1, 2, 4, 8))
    c = Calibration(model, points, fixed, per, 0.0, 0.0)
    if fp16 is None:
        return c
    half = Calibration(model, points[::3], fixed * FP16, per * FP16, 0.0, 0.0, value="precision=fp16", factor=FP16)
    return Calibration(model, points, fixed, per, 0.0, 0.0, value="precision=fp32", values=(half,) if fp16 else ())


def _predictor(tmp_path: Path, *, fp16: bool) -> PipelinePredictor:
    p = _pipeline.build(SPACE, _repo(tmp_path), "stages", latency_budget_us=200_000.0)
    t = SimpleNamespace(subject=SimpleNamespace(pipeline=p), s=SimpleNamespace(budget=Budget(200.0, 99.0)))
    steps = [_step(m, fp16=fp16 if m == "stage_infer" else None) for m in STEPS]
    ps = PipelinePredictor(t, calibration=Calibration("stages", (), 0.0, 0.0, 0.0, 0.0, steps=tuple(steps)))  # type: ignore[arg-type]  # a stand-in runner: the pure parts read its subject and budget
    ps.order = ps.step_order()
    ps.models = {c.model: (predict.service_model(c), predict.contention(c)) for c in steps}
    ps.step_cals = {c.model: c for c in steps}
    return ps


BATCHED = {"max_batch_size": TOP, "dynamic_batching": True, "max_queue_delay_us": 2000, "preferred_batch_sizes": "none"}


def _joint(precision: str) -> dict[str, Any]:
    """Every step batching, stage_infer at `precision`."""
    per = {m: dict(BATCHED) for m in STEPS}
    per["stage_infer"]["precision"] = precision
    return _pipeline.join(per)


def _rate(ps: PipelinePredictor, params: dict[str, Any]) -> float:
    return predict.pipeline_rate(ps.steps(ps.configs(params)), 200_000.0, requests=2_000).rate_rps


def test_the_pipeline_predictor_simulates_a_step_at_its_configs_value_with_that_values_curve(tmp_path):
    ps = _predictor(tmp_path, fp16=True)
    infer = ps.pipeline.step("stage_infer")
    # stage_infer's points crossed with both precisions; the others' (no precision searched) as they are
    assert {q.get("precision") for q in ps.step_points(infer, {"precision": "fp32"})} == {"fp32", "fp16"}
    assert all("precision" not in q for q in ps.step_points(ps.pipeline.step("stage_decode"), {}))
    at16, at32 = ps.configs(_joint("fp16")), ps.configs(_joint("fp32"))
    assert [c.variant for c in at16] == ["", "precision=fp16", ""] and ps.key(_joint("fp16")) != ps.key(_joint("fp32"))
    assert ps.steps(at16)[1].service.service_us(TOP) == pytest.approx(FP16 * ps.steps(at32)[1].service.service_us(TOP))
    # stage_infer bounds the ensemble (38 ms a batch of 8 at fp32 against stage_decode's 7.6):
    # at fp16 it runs each batch in half the time, and the ensemble holds well above fp32's rate
    assert _rate(ps, _joint("fp16")) > 1.5 * _rate(ps, _joint("fp32"))
    # what a request spends at least outside stage_decode: stage_infer at its fastest value, fp16
    assert ps.rest_us("stage_decode") == pytest.approx(FP16 * 31_000.0 + 320.0)


def test_a_steps_value_not_calibrated_is_not_predicted(tmp_path):
    ps = _predictor(tmp_path, fp16=False)  # measured at fp32, fp16 refused by the server
    infer = ps.pipeline.step("stage_infer")
    assert {q.get("precision") for q in ps.step_points(infer, {"precision": "fp32"})} == {"fp32"}
    assert ps.predictable(ps.configs(_joint("fp32"))) and not ps.predictable(ps.configs(_joint("fp16")))
    assert ps.models_at("stage_infer", "precision=fp16") is None


def test_a_step_calibrated_on_its_own_forms_its_values_batches_with_clients_of_the_step(tmp_path, monkeypatch):
    # A model a BLS model calls sees one call at a time from each BLS instance, so its values' batch
    # sizes are formed by clients of the model itself (_bls_calibrate.py passes on_step=True): the
    # same step_values, its closed levels on the step, the factor read from the step's own statistics.
    from perfkit.tuner._search import _pipeline_calibrate

    on_step = functools.partial(_pipeline_calibrate.step_values, on_step=True)
    monkeypatch.setattr(_pipeline_calibrate, "step_values", on_step)
    cal, measure, _ = _tune(tmp_path)
    assert [(m, n) for m, at_fp16, n in measure.levels if at_fp16] == [("stage_infer", 1), ("stage_infer", TOP)]
    fp16 = cal.steps[1].values[0]
    assert fp16.value == "precision=fp16" and fp16.factor == pytest.approx(FP16, rel=0.01)

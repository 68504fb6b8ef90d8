"""The predicted BLS search's pure parts (tuner/_search/_predict_bls.py): the BLS model first, then
the models it calls in the order given; the BLS model's own points its instance counts only; each
called model's calls per request from the fan-out read; what a request spends outside one model
(its own time and the other calls, times their fan-out); and the BLS model's measured execution,
which holds its calls, never read as its own time. No server."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from perfkit.predict import Contention, ServiceModel, StepFigures
from perfkit.records import Budget, Calibration, CalibrationPoint
from perfkit.tuner import _pipeline
from perfkit.tuner._search._predict_bls import BlsPredictor
from perfkit.tuner._search._predict_step_checks import StepCheck, StepsChecked
from perfkit.tuner._space import TuneSpace
from tests.conftest import copy_models

SPACE = TuneSpace(max_batch_sizes=(4, 8), instance_counts=(1, 2), queue_delay_us=(2000, 2000),
                  preferred_batch_sizes=("none",))  # fmt: skip


def _predictor(tmp_path: Path) -> BlsPredictor:
    repo = copy_models(tmp_path, ["bls_stages", "stage_decode", "stage_infer"])
    p = _pipeline.build(SPACE, repo, "bls_stages", composing=("stage_decode", "stage_infer"),
                        latency_budget_us=100_000.0)  # fmt: skip
    t = SimpleNamespace(subject=SimpleNamespace(pipeline=p), s=SimpleNamespace(budget=Budget(100.0, 99.0)))
    ps = BlsPredictor(t)  # type: ignore[arg-type]  # a stand-in runner: the pure parts read its subject only
    ps.fanout = (1, 2)
    ps.order = ps.step_order()
    ps.models = {
        "bls_stages": (ServiceModel(1_000.0, 0.0), Contention()),
        "stage_decode": (ServiceModel(6_000.0, 200.0), Contention()),
        "stage_infer": (ServiceModel(6_000.0, 200.0), Contention()),
    }
    return ps


def test_the_bls_model_comes_first_and_its_own_points_are_its_instance_counts(tmp_path: Path):
    ps = _predictor(tmp_path)
    assert ps.order == [("bls_stages", ()), ("stage_decode", ()), ("stage_infer", ())]
    p = ps.pipeline
    base = {"max_batch_size": 8, "dynamic_batching": False, "instance_count": 1}
    own = ps.step_points(p.step("bls_stages"), base)
    assert own == [{**base, "instance_count": 1}, {**base, "instance_count": 2}]
    called = ps.step_points(p.step("stage_decode"), base)
    assert len(called) > len(own) and any(q.get("dynamic_batching") for q in called)  # every point of a called model
    assert not ps.scored_alone(p.step("bls_stages")) and ps.scored_alone(p.step("stage_infer"))


def test_each_called_model_counts_its_calls_per_request(tmp_path: Path):
    ps = _predictor(tmp_path)
    assert [ps.calls_of(m) for m, _ in ps.order] == [1, 1, 2]
    # outside stage_decode: the BLS model's own 1 ms and two stage_infer calls of 6.2 ms
    assert ps.rest_us("stage_decode") == pytest.approx(1_000.0 + 2 * 6_200.0)
    assert ps.rest_us("stage_infer") == pytest.approx(1_000.0 + 6_200.0)
    assert ps.sim == {"fanout": (1, 2), "requests": 2_000}
    # stage_infer calibrated at fp32 and fp16 (half): outside stage_decode, its calls at the faster
    points = tuple(CalibrationPoint(n, 100, 6_000.0 + 200.0 * n) for n in (1, 8))
    half = Calibration("stage_infer", points, 3_000.0, 100.0, 0.0, 0.0, value="precision=fp16", factor=0.5)
    ps.step_cals = {"stage_infer": Calibration("stage_infer", points, 6_000.0, 200.0, 0.0, 0.0,
                                               value="precision=fp32", values=(half,))}  # fmt: skip
    assert ps.rest_us("stage_decode") == pytest.approx(1_000.0 + 2 * 3_100.0)


def test_the_bls_models_measured_execution_is_not_read_as_its_own_time(tmp_path: Path):
    ps = _predictor(tmp_path)
    bls = StepFigures("bls_stages", 0.0, 20_000.0, 1.0, 50.0, 0.9)  # held through its calls
    decode = StepFigures("stage_decode", 0.0, 6_200.0, 1.0, 160.0, 0.3)
    ps.steps_seen[1] = StepsChecked(1, 45.0, (StepCheck(bls, 10.0, 15_000.0, 1.0),
                                              StepCheck(decode, 5.0, 5_900.0, 1.0)))  # fmt: skip
    assert ps.execution_scale() == pytest.approx({"stage_decode": 5_900.0 / 6_200.0})

"""The predicted pipeline search's pure parts: the steps' order and what each reads from, taken
from the ensemble's input_map/output_map (series for `stages`, a fork for a diamond), each step's
simulated points, and tune records written before pipeline calibrations still load. No server."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from perfkit.predict import BatcherConfig, Contention, ServiceModel, StepFigures
from perfkit.records import Budget, Calibration, CalibrationPoint, TuneRecord, from_dict, to_dict
from perfkit.tuner import _pipeline
from perfkit.tuner._search._predict_pipeline import PipelinePredictor, _points, step_order
from perfkit.tuner._search._predict_step_checks import StepCheck, StepsChecked
from perfkit.tuner._space import TuneSpace
from tests.conftest import copy_models

SPACE = TuneSpace(max_batch_sizes=(4, 8), instance_counts=(1, 2), queue_delay_us=(2000, 2000),
                  preferred_batch_sizes=("none",))  # fmt: skip

FORK = """name: "fork"
platform: "ensemble"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUT_A" data_type: TYPE_FP32 dims: [ 16 ] }, { name: "OUT_B" data_type: TYPE_FP32 dims: [ 16 ] } ]
ensemble_scheduling {
  step [
    { model_name: "stage_post" model_version: -1 input_map { key: "INPUT0" value: "decoded" }
      output_map { key: "OUTPUT0" value: "OUT_B" } },
    { model_name: "stage_decode" model_version: -1 input_map { key: "INPUT0" value: "INPUT0" }
      output_map { key: "OUTPUT0" value: "decoded" } },
    { model_name: "stage_infer" model_version: -1 input_map { key: "INPUT0" value: "decoded" }
      output_map { key: "OUTPUT0" value: "OUT_A" } }
  ]
}
"""


def test_stages_run_in_series_and_a_fork_reads_from_its_producer(tmp_path: Path):
    repo = copy_models(tmp_path, ["stages", "stage_decode", "stage_infer", "stage_post"])
    p = _pipeline.build(SPACE, repo, "stages", latency_budget_us=100_000.0)
    assert step_order(p) == [("stage_decode", ()), ("stage_infer", ("stage_decode",)), ("stage_post", ("stage_infer",))]
    (repo / "fork").mkdir()
    (repo / "fork" / "config.pbtxt").write_text(FORK)
    fork = _pipeline.build(SPACE, repo, "fork", latency_budget_us=100_000.0)
    # Listed out of order: the producer comes first, both branches read from it.
    assert step_order(fork) == [("stage_decode", ()), ("stage_post", ("stage_decode",)),
                                ("stage_infer", ("stage_decode",))]  # fmt: skip


def test_each_steps_points_drop_batching_knobs_where_batching_is_off(tmp_path: Path):
    repo = copy_models(tmp_path, ["stages", "stage_decode", "stage_infer", "stage_post"])
    p = _pipeline.build(SPACE, repo, "stages", latency_budget_us=100_000.0)
    pts = _points(p.step("stage_decode"), {"max_batch_size": 8, "dynamic_batching": False, "instance_count": 1})
    assert all("max_queue_delay_us" not in q for q in pts if not q["dynamic_batching"])
    assert all(q["max_queue_delay_us"] == 2000 for q in pts if q["dynamic_batching"])
    # batching on/off x 1/2 instances: max_batch_size stays 8, a step may not go below its ensemble's
    assert len(pts) == 4 and {q["instance_count"] for q in pts} == {1, 2}
    assert {(q["dynamic_batching"], q["instance_count"]) for q in pts} == {
        (a, b) for a in (True, False) for b in (1, 2)
    }


def test_a_pipeline_calibration_round_trips_and_old_calibrations_load():
    step = Calibration("stage_decode", (CalibrationPoint(1, 10, 6_500.0),), 6_300.0, 200.0, 0.01, 0.02)
    cal = Calibration("stages", (), 0.0, 0.0, 0.01, 0.02, overhead_us=900.0, duration_s=12.0, steps=(step,))
    assert from_dict(Calibration, json.loads(json.dumps(to_dict(cal)))) == cal
    old = to_dict(step)
    del old["steps"]  # a record written before pipelines were calibrated
    assert from_dict(Calibration, old) == step
    assert TuneRecord.__dataclass_fields__["calibration"].default is None


def test_the_bottleneck_is_the_step_of_least_predicted_capacity_checked_against_tritons_breakdown():
    decode = StepFigures("stage_decode", 300_000.0, 9_900.0, 7.9, 713.0, 1.0)
    infer = StepFigures("stage_infer", 100.0, 10_480.0, 7.9, 1_400.0, 0.5)
    agree = StepsChecked(2, 809.0, (StepCheck(decode, 97_810.0, 9_450.0, 7.9), StepCheck(infer, 360.0, 9_650.0, 7.9)))
    assert agree.bottleneck.predicted.name == "stage_decode" and agree.measured_bottleneck() == "stage_decode"
    line = agree.line()
    assert (
        "bottleneck: stage_decode (predicted capacity 713 req/s): compute 9.90 ms predicted, 9.45 ms measured (-5%)"
        in line
    )
    assert "breakdown puts the most time there too" in line
    differ = StepsChecked(3, 500.0, (StepCheck(decode, 100.0, 9_000.0, 4.0), StepCheck(infer, 50_000.0, 9_000.0, 4.0)))
    assert "breakdown puts the most time in stage_infer" in differ.line()
    unknown = StepsChecked(4, 500.0, (StepCheck(decode, None, None, None), StepCheck(infer, None, None, None)))
    assert unknown.measured_bottleneck() is None and "9.90 ms predicted, - measured" in unknown.line()


class _TwoSteps(PipelinePredictor):
    """The pipeline search over two steps in series, `front` (batching, max 8) and `post`, whose
    batching a point's `post` param says; no subject needed."""

    def configs(self, params):
        post = BatcherConfig(8, True, (), 2000.0, 1) if params.get("post") else BatcherConfig(0, False, (), 0.0, 1)
        return [BatcherConfig(8, True, (), 2000.0, 1), post]


def _two_steps() -> _TwoSteps:
    t = SimpleNamespace(
        s=SimpleNamespace(budget=Budget(100.0, 99.0, "latency")),
        trial_load=SimpleNamespace(distribution="poisson"),
        original_fixed_params=dict,
    )
    ps = _TwoSteps(t, calibration=Calibration("two", (), 0.0, 0.0, 0.01, 0.01, overhead_us=100.0))  # type: ignore[arg-type]  # a stand-in runner
    ps.order = [("front", ()), ("post", ("front",))]
    ps.models = {
        "front": (ServiceModel(1_000.0, 100.0), Contention()),  # 8 in 1.8 ms: 4,400 req/s
        "post": (ServiceModel(1_280.0, 0.0), Contention()),  # unbatched, 1.28 ms: 780 req/s
    }
    return ps


def test_a_waiting_config_bounded_by_a_step_measured_faster_than_calibrated_is_predicted_again_with_it():
    """stages: the post step executed in 0.85 ms where the calibration said 1.28; post without
    batching, predicted at that step's bound, was passed over though the grid read it best."""
    ps = _two_steps()
    rate = 760.0  # about what post unbatched is predicted at: its 1.28 ms bound
    assert ps.favourable_rps({}, rate, 1.02) == (rate * 1.02, "")  # no step measured yet: taken up only
    front = StepFigures("front", 500.0, 1_500.0, 6.0, 4_400.0, 0.2)
    post = StepFigures("post", 900.0, 1_280.0, 1.0, 780.0, 0.97)
    ps.steps_seen[0] = StepsChecked(
        0, 700.0, (StepCheck(front, 400.0, 1_450.0, 6.0), StepCheck(post, 20.0, 850.0, 1.0))
    )
    assert ps.execution_scale() == pytest.approx({"front": 1_450.0 / 1_500.0, "post": 850.0 / 1_280.0})
    could, also = ps.favourable_rps({}, rate, 1.02)
    assert could > 900.0 > rate * 1.02  # with post at 0.85 ms it holds past what it was passed over for
    assert could < 1.05 * 1e6 / 850.0  # not past the measured bound (kept up with: 95% done)
    assert "post x0.66" in also and f"{could:.0f} req/s" in also
    # a step that ran slower than calibrated gives no more than the prediction taken up
    ps.steps_seen[0] = StepsChecked(
        0, 700.0, (StepCheck(front, 400.0, 1_600.0, 6.0), StepCheck(post, 20.0, 1_400.0, 1.0))
    )
    assert ps.favourable_rps({}, rate, 1.02) == (rate * 1.02, "")

"""`perfkit plan` for configs never measured: replicas from a rate the batcher simulator predicts
with a tune record's calibration, marked as predicted, with the range its calibration error spans,
beside the measured plan. Synthetic records: the queue fixture's service model (10 ms per
execution, no batching) whose predicted rates have closed forms. No server."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from perfkit.capacity import KnobChoice, knob_choice, plan_predicted, predict_evidence, predicted_space
from perfkit.cli import main
from perfkit.errors import ExitCode, InputError, UsageError
from perfkit.predict import BatcherConfig, Contention, ServiceModel, sustainable_rate
from perfkit.records import Budget, Calibration, CalibrationPoint, LoadLevel, Machine, TrialRecord, TuneRecord
from tests.support.queueing import sustainable_rate_rps

R90 = LoadLevel("request_rate", 90.0, "poisson")
ORIGINAL = 'name: "queue"\nbackend: "python"\nmax_batch_size: 8\ninstance_group [{ count: 1, kind: KIND_CPU }]\n'
CAL = Calibration(
    model="queue",
    points=(CalibrationPoint(1, 400, 10_000.0), CalibrationPoint(2, 100, 10_400.0)),
    fixed_us=10_000.0,
    per_item_us=0.0,
    fit_rms_rel=0.02,
    fit_max_rel=0.04,
    instance_counts=(1, 2),
    saturated_rps=(100.0, 200.0),
    shared_fraction=0.0,
)


def _tune(cal: Calibration | None = CAL, *, feasible: bool = True) -> TuneRecord:
    measured = TrialRecord(0, "complete", {"instance_count": 1}, R90, 66.0, 98_000.0, feasible, is_original=True,
                           metrics={"predicted_rps": 72.0})  # fmt: skip
    other = TrialRecord(1, "complete", {"instance_count": 2}, R90, 150.0, 90_000.0, feasible,
                        metrics={"predicted_rps": 160.0})  # fmt: skip
    return TuneRecord("0", "now", (), Machine.from_mapping({}), {}, "queue", Budget(100.0, 99.0), "throughput",
                      ORIGINAL, None, 1 if feasible else None, (measured, other), calibration=cal)  # fmt: skip


def test_a_named_config_is_predicted_at_its_closed_form_rate():
    # One instance, no batching, D = 10 ms: an M/D/1 queue, whose p99 <= 100 ms holds up to Erlang's
    # sustainable rate (the simulator's 6,000 requests put it within ~9% of it).
    choice = knob_choice(dynamic_batching=False, instance_counts="1")
    ev = predict_evidence(_tune(), choice, budget_ms=100.0)
    assert ev.configs_scored == 1 and ev.config["instance_count"] == 1 and not ev.config["dynamic_batching"]
    assert ev.rate_rps == pytest.approx(sustainable_rate_rps("M/D/1", 10.0, 100.0), rel=0.12)
    assert ev.latency_ms <= 100.0
    # The band is the calibration fit's worst error; the tune's measured predictions are stated.
    assert ev.error_rel == 0.04 and (ev.low_rps, ev.high_rps) == pytest.approx((ev.rate_rps * 0.96, ev.rate_rps * 1.04))
    assert ev.checked == 2 and ev.measured_worst_rel == pytest.approx(abs(66 / 72 - 1))
    assert ev.measured_median_rel == pytest.approx((abs(66 / 72 - 1) + abs(150 / 160 - 1)) / 2)


def test_replicas_come_from_the_predicted_rate_and_its_band():
    ev = predict_evidence(_tune(), knob_choice(instance_counts="2", dynamic_batching=False), budget_ms=100.0)
    plan = plan_predicted(ev, target_rps=2_000, headroom=0.3)
    need = 2_000 * 1.3
    assert plan.replicas == math.ceil(need / ev.rate_rps)
    assert plan.replicas_low == math.ceil(need / (ev.rate_rps * 1.04))
    assert plan.replicas_high == math.ceil(need / (ev.rate_rps * 0.96))
    assert plan.replicas_low <= plan.replicas <= plan.replicas_high
    text = "\n".join(plan.lines())
    assert "predicted" in text and f"replicas: {plan.replicas} (predicted +- calibration error" in text
    assert "+-4.0%" in text and "off by" in text and "(2 configs)" in text
    data = plan.to_json()
    assert data["predicted"] is True and data["replicas_range"] == [plan.replicas_low, plan.replicas_high]


def test_two_independent_instances_predict_more_than_one():
    tune = _tune()
    one = predict_evidence(tune, knob_choice(instance_counts="1", dynamic_batching=False), budget_ms=100.0)
    two = predict_evidence(tune, knob_choice(instance_counts="2", dynamic_batching=False), budget_ms=100.0)
    # M/D/2 against M/D/1 at the same budget: more than twice (pooled servers), less than the bound 200.
    assert 2 * one.rate_rps < two.rate_rps < 200.0


def test_the_whole_space_is_predicted_and_its_best_shown():
    tune = _tune()
    cfgs = predicted_space(tune, KnobChoice(), 100.0)
    # max_batch_size at powers of two up to the largest calibrated (2; the original's 8 would be
    # extrapolated), with and without batching, 9 delays x 2 preferred choices, instances 1..4.
    assert {c.max_batch_size for c in cfgs} == {1, 2} and {c.instances for c in cfgs} == {1, 2, 3, 4}
    assert len(cfgs) == 4 * (2 + 9 * 2)
    ev = predict_evidence(tune, KnobChoice(), budget_ms=100.0)
    assert ev.configs_scored == len(cfgs) and ev.config["instance_count"] == 4
    svc = ServiceModel(CAL.fixed_us, CAL.per_item_us)
    c = ev.config
    cfg = BatcherConfig(c["max_batch_size"], c["dynamic_batching"], tuple(c["preferred_batch_sizes"]),
                        c["max_queue_delay_us"], c["instance_count"])  # fmt: skip
    assert ev.rate_rps == pytest.approx(sustainable_rate(cfg, svc, 100_000.0, requests=6_000,
                                                         contention=Contention()).rate_rps, rel=0.03)  # fmt: skip


def test_knob_flags_parse_and_bad_values_are_usage_errors():
    assert knob_choice(queue_delays_us="100:10000").queue_delays_us == pytest.approx(
        tuple(100 * 100 ** (i / 7) for i in range(8))
    )
    assert knob_choice(queue_delays_us="0,500").queue_delays_us == (0.0, 500.0)
    assert knob_choice(max_batch_sizes="16,32").max_batch_sizes == (16, 32) and not KnobChoice().named
    with pytest.raises(UsageError, match="--max-batch-sizes"):
        knob_choice(max_batch_sizes="big")
    with pytest.raises(UsageError, match="--queue-delays-us"):
        knob_choice(queue_delays_us="500:100")
    with pytest.raises(UsageError, match="--preferred-batch-sizes 'odd'"):
        knob_choice(preferred_batch_sizes="none,odd")
    with pytest.raises(InputError, match="no calibration"):
        predict_evidence(_tune(None), KnobChoice(), budget_ms=100.0)


def test_cli_shows_the_predicted_plan_beside_the_measured_one(tmp_path: Path, capsys):
    folder = tmp_path / "tune"
    folder.mkdir()
    _tune().save(folder / "tune.json")
    rc = main(["plan", str(folder), "--target-rate", "2k/s", "--instance-counts", "2", "--no-dynamic-batching"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "replicas: " in out and "from " in out  # the measured plan, as before
    assert "predicted (the config named): max_batch_size 8, no dynamic batching, 2 instance(s)" in out
    assert "extrapolated" not in out  # without batching every execution is one request: calibrated
    assert main(["plan", str(folder), "--target-rate", "2k/s", "--max-batch-sizes", "8", "--dynamic-batching"]) == 0
    assert "past the largest batch size calibrated (2)" in capsys.readouterr().out
    assert "predicted +- calibration error" in out
    rc = main(["plan", str(folder), "--target-rate", "2k/s", "--predict", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["replicas"] >= 1 and data["predicted"]["predicted"] is True
    assert data["predicted"]["configs_scored"] == 80 and data["predicted"]["replicas_range"][0] >= 1
    # A tune that recommends nothing measured: the prediction still plans, the measured plan's absence said.
    _tune(feasible=False).save(folder / "tune.json")
    rc = main(["plan", str(folder), "--target-rate", "2k/s", "--instance-counts", "2"])
    out = capsys.readouterr().out
    assert rc == 0 and "measured: no plan" in out and "predicted (the config named)" in out
    # Without --predict that is the error it always was; a record without a calibration cannot predict.
    assert main(["plan", str(folder), "--target-rate", "2k/s"]) == ExitCode.INPUT
    _tune(None).save(folder / "tune.json")
    capsys.readouterr()
    assert main(["plan", str(folder), "--target-rate", "2k/s", "--predict"]) == ExitCode.INPUT
    assert "no calibration" in capsys.readouterr().err


def test_the_plan_page_shows_the_predicted_plan_beside_the_measured_one(tmp_path: Path):
    folder = tmp_path / "tune"
    folder.mkdir()
    _tune().save(folder / "tune.json")
    page = tmp_path / "plan.html"
    rc = main(["plan", str(folder), "--target-rate", "2k/s", "--instance-counts", "2", "--no-dynamic-batching",
               "--report", str(page)])  # fmt: skip
    assert rc == 0
    text = page.read_text()
    assert 'data-table="evidence"' in text and 'data-table="predicted"' in text
    assert "a prediction, not a measurement" in text and "±4.0%" in text
    found = re.search(r'<script type="application/json" id="perfkit-data">(.*?)</script>', text, re.S)
    assert found is not None
    data = json.loads(found.group(1))
    assert data["predicted"]["config"]["instance_count"] == 2 and data["replicas"] >= 1

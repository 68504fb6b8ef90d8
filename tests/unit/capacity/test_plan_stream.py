"""`perfkit plan --predict` from a streamed model's predicted tune: its calibration models each
stream whole (the instance held for it), so a plan predicts the end-to-end latency, which the tune's
TTFT budget is not: without --latency-budget the plan says so; with one it plans. No server."""

from __future__ import annotations

import json
from pathlib import Path

from perfkit.cli import main
from perfkit.errors import ExitCode
from perfkit.records import Budget, Calibration, CalibrationPoint, LoadLevel, Machine, TrialRecord, TuneRecord

ORIGINAL = (
    'name: "stream_held"\nbackend: "python"\nmax_batch_size: 0\nmodel_transaction_policy { decoupled: true }\n'
    "instance_group [{ count: 1, kind: KIND_CPU }]\n"
)
CAL = Calibration(model="stream_held", points=(CalibrationPoint(1, 45, 21_000.0),), fixed_us=21_000.0, per_item_us=0.0,
                  fit_rms_rel=0.0, fit_max_rel=0.0, instance_counts=(1, 2), saturated_rps=(47.0, 94.0))  # fmt: skip


def test_a_ttft_tunes_prediction_plans_an_end_to_end_budget_given_and_asks_for_one_otherwise(tmp_path: Path, capsys):
    trial = TrialRecord(0, "complete", {"instance_count": 3}, LoadLevel("request_rate", 100.0, "poisson"), 100.0,
                        45_000.0, True, is_original=True, metrics={"predicted_rps": 90.0})  # fmt: skip
    rec = TuneRecord("0", "now", (), Machine.from_mapping({}), {}, "stream_held", Budget(50.0, 99.0, metric="ttft"),
                     "throughput", ORIGINAL, None, 0, (trial,), calibration=CAL)  # fmt: skip
    folder = tmp_path / "tune"
    folder.mkdir()
    rec.save(folder / "tune.json")
    assert main(["plan", str(folder), "--target-rate", "400/s", "--predict"]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "TTFT p99" in err and "end-to-end latency" in err and "--latency-budget" in err
    rc = main(["plan", str(folder), "--target-rate", "400/s", "--predict", "--latency-budget", "200ms",
               "--instance-counts", "2", "--json"])  # fmt: skip
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["predicted"]["predicted"] is True and data["predicted"]["replicas_range"][0] >= 2

"""perfkit tune's predicted search against a real Triton (the default, --search auto, for this
open-loop tune of one model; --search predict for the fallback): the calibration fits the known-truth
queue fixture (deterministic service, instances that do not contend), the predicted best is the
known best and its measured rate is within the stated tolerance of the prediction; on the same
fixture with exponential service, which the simulator (deterministic service per batch size)
cannot capture, the tuner says the predictions are off and goes on with the measured search; and
a predicted tune across two precisions of the batcher fixture (a known, different service curve
at each) calibrates a curve per precision, and picks the precision the known model says."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from perfkit.predict import contention
from perfkit.records import Calibration, RunRecord, TuneRecord
from perfkit.tuner._search._predict import LATENCY_TOLERANCE, PREDICTION_TOLERANCE

pytestmark = [pytest.mark.usefixtures("tritonserver"), pytest.mark.slow]

MEASURED_SPREAD = 0.6


def _tune(
    repo: Path, out: Path, *extra: str, search: str | None = "predict", model: str = "queue"
) -> subprocess.CompletedProcess[str]:
    # Cheap settings: two configs (1 or 2 instances), short windows, no confirmation runs.
    # search None: the default (--search auto), which predicts an open-loop tune of one model.
    cmd = [sys.executable, "-m", "perfkit", "tune", "-m", model, "--model-repository", str(repo), "-o", str(out),
           *(["--search", search] if search else []), "--instance-counts", "1,2", "--measurement-interval", "400",
           "--confirm", "0", *extra]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}, timeout=900)


def test_predicted_tune_picks_the_known_best_and_the_measurement_holds_the_prediction(model_repo: Path, tmp_path):
    out = tmp_path / "out"
    proc = _tune(model_repo, out, "--latency-budget", "100ms", "--trials", "3", search=None)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "--search auto: predicting" in proc.stdout, proc.stdout
    assert "calibrated in" in proc.stdout and "predicted 2 configs" in proc.stdout, proc.stdout
    rec = TuneRecord.load(out / "tune.json")
    # tune.json says which search ran and why (auto's reason)
    assert rec.search == "predict" and rec.search_reason.startswith("--search auto"), rec.search_reason
    cal = rec.calibration
    assert cal is not None and cal.model == "queue"
    # One execution of the queue fixture takes service_ms = 10 (plus the python backend's own
    # cost); sleeping instances hardly contend (two delivered 1.49x to 1.86x one over four runs on 2
    # cores shared with ~9 busy jobs).
    assert [p.batch_size for p in cal.points] == [1] and 9_000 <= cal.fixed_us <= 20_000, cal
    assert cal.instance_counts == (1, 2) and contention(cal).instance_scaling(2) >= 1.3, cal
    predicted = [t for t in rec.trials if "predicted_rps" in t.metrics]
    assert predicted and all(t.params.get("instance_count") == 2 for t in predicted[:1]), proc.stdout
    first = predicted[0]
    assert first.feasible and first.throughput_infer_per_s is not None
    ratio = first.throughput_infer_per_s / first.metrics["predicted_rps"]
    lines = "\n".join(line for line in proc.stdout.splitlines() if "calibrated" in line or "trial" in line)
    # The stated tolerance of this test: the measured search's own figure for this config moved
    # from 91 to 172 req/s over three runs on 2 cores shared with ~9 busy jobs (load average 15).
    assert abs(ratio - 1) <= MEASURED_SPREAD, (ratio, lines)
    _checks_follow_the_tolerances(proc.stdout, lines)
    best = rec.best()
    assert best is not None and best.params.get("instance_count") == 2  # the known best: two instances
    frame = pd.read_csv(out / "trials.csv")
    assert "predicted_rps" in frame.columns
    # Your config (one instance) cannot compete with two: measured at its predicted rate only, a level
    # that holds there its figure (a lower bound); one over the budget searched down as usual.
    assert "cannot compete" in proc.stdout, lines
    orig = rec.original()
    assert orig is not None
    levels = RunRecord.load(out / "runs" / f"trial-{orig.number:03d}.json").levels
    if orig.rate_is_lower_bound:
        assert len(levels) == 1 and orig.load == levels[0].load, levels
        assert "at most" in proc.stdout and "vs the original (at least" in proc.stdout, proc.stdout
    else:
        # the start (the highest level) did not hold: the figure, if any, is below it
        assert len(levels) > 1 and (orig.load is None or orig.load.value < levels[-1].load.value), levels


def _checks_follow_the_tolerances(stdout: str, lines: str) -> None:
    # The tuner's own decision follows its tolerances, for each trial it checked (the predicted ones
    # and the original's, measured anyway): the rate within 25%, or past it the simulated p99 at
    # the rate measured within 10% of the measured ("off by more than 25%; ... within 10%: holds");
    # held everywhere, the search stopped; held nowhere for a trial, it said so and went on.
    checks = re.findall(
        r"trial \d+: predicted (\d+) req/s, measured (\d+) \([^,]+, (within|off by more than|OFF BY MORE THAN)"
        r"(?:[^\n]*?simulated ([\d.]+) ms, measured ([\d.]+) ms)?",
        stdout,
    )
    assert checks, lines
    for want, got, verdict, sim_ms, meas_ms in checks:
        near = abs(int(got) / int(want) - 1) <= PREDICTION_TOLERANCE + 0.01  # the line's figures are rounded
        far = abs(int(got) / int(want) - 1) > PREDICTION_TOLERANCE - 0.01
        assert (verdict == "within" and near) or (verdict != "within" and far), (want, got, verdict, lines)
        if verdict == "off by more than":  # held by the latency at the rate measured
            assert abs(float(sim_ms) / float(meas_ms) - 1) <= LATENCY_TOLERANCE + 0.01, (sim_ms, meas_ms, lines)
    if all(verdict != "OFF BY MORE THAN" for *_, verdict, _, _ in checks):
        assert "their predictions held" in stdout, lines
    else:
        assert "going on with the measured search" in stdout, lines


@pytest.mark.quiet
def test_a_model_the_simulator_cannot_capture_falls_back_to_the_measured_search(model_repo: Path, tmp_path):
    config = model_repo / "queue" / "config.pbtxt"
    config.write_text(config.read_text().replace('string_value: "deterministic"', 'string_value: "exponential"'))
    out = tmp_path / "out"
    # At a budget of 5 mean service times, exponential service (p99 of one service alone: 4.6 means)
    # holds far less than deterministic service on one instance: the original's trial (one
    # instance, measured anyway) reads about 30 req/s against some 50 predicted, past the
    # tolerance. (Two instances hold more of the tail: one run measured 116 against 132 predicted,
    # within it; at 7 means 400 ms windows read the tail too short to tell.)
    proc = _tune(model_repo, out, "--latency-budget", "50ms", "--trials", "3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "OFF BY MORE THAN" in proc.stdout and "going on with the measured search" in proc.stdout, proc.stdout
    assert "their predictions held" not in proc.stdout
    # The measured search went on after the predicted trial (to --trials, or until the two configs
    # of this space were all measured: the draw that repeats one ends the search).
    assert "stopping: 3 trials done" in proc.stdout or "every config of the space measured (2)" in proc.stdout, (
        proc.stdout
    )
    rec = TuneRecord.load(out / "tune.json")
    assert rec.calibration is not None and len(rec.trials) >= 3
    assert (rec.search, rec.search_reason) == ("predict", "asked for with --search predict")
    assert json.loads((out / "tune.json").read_text())["calibration"]["model"] == "queue"


def _fitted_ms(cal: Calibration, n: int) -> float:
    return (cal.fixed_us + cal.per_item_us * n) / 1e3


# quiet: the two precisions' curves are calibrated a few seconds apart and differ by 12% at the best
# config; on a machine other tests load, the load moves between the two calibrations by more than that
@pytest.mark.quiet
def test_a_predicted_tune_across_two_precisions_picks_the_precision_its_known_service_model_says(
    model_repo: Path, tmp_path
):
    # The batcher fixture (fixtures/models/batcher/1/model.py): one execution of N requests of one
    # item takes host_ms N + (fixed_ms + per_item_ms N) x the precision's factor, 1.0 N + 2.0 + 0.25 N
    # ms at fp32 and 0.55 x that device part at fp16: fp16 is faster at every batch size, by
    # 0.9 + 0.1125 N ms, and not by one factor (the host's part is not scaled: x0.69 at batch 1,
    # x0.88 at 16). Every config is faster at fp16, so the best is at fp16.
    out = tmp_path / "out"
    proc = _tune(model_repo, out, "--latency-budget", "50ms", "--trials", "4", "--precisions", "fp32,fp16",
                 "--max-batch-sizes", "4,8,16", "--dynamic-batching", search=None, model="batcher")  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "--search auto: predicting" in proc.stdout, proc.stdout
    lines = proc.stdout
    rec = TuneRecord.load(out / "tune.json")
    cal = rec.calibration
    assert cal is not None and cal.value == "precision=fp32", lines
    assert [c.value for c in cal.values] == ["precision=fp16"], lines
    fp16 = cal.values[0]
    # no one factor: fp16 measured at every batch size and both instance counts, its own line
    assert fp16.factor == 0 and sorted(p.batch_size for p in fp16.points)[-1] == 16, fp16
    assert fp16.instance_counts == (1, 2), fp16
    assert re.search(r"calibrated in \d+ s at precision=fp32: ", proc.stdout), lines
    assert "\n    precision=fp16: execution " in proc.stdout, lines  # the calibrated line, per value
    # fp16's curve below fp32's where the known difference is largest, at batch 16 (19.3 against
    # 22.0 ms, with the backend's own cost on both). Not compared at batch 1: 1.0 ms apart there, the
    # fitted lines' intercepts, off by a few percent of the whole line, read either way under load.
    assert _fitted_ms(fp16, 16) < _fitted_ms(cal, 16), lines
    # the space crossed with both precisions, the best predicted and the pick at fp16
    predicted = [t for t in rec.trials if "predicted_rps" in t.metrics]
    assert predicted and predicted[0].params.get("precision") == "fp16", lines
    best = rec.best()
    assert best is not None and best.params.get("precision") == "fp16", lines
    first = predicted[0]
    assert first.feasible and first.throughput_infer_per_s is not None
    ratio = first.throughput_infer_per_s / first.metrics["predicted_rps"]
    if cal.host_us > 0:
        # Under a heavy load the calibration can read the instance less busy than
        # predict.HOST_BOUND_BUSY at the overload (one run here: 80%) and take the request path for
        # the bound: every config is then predicted at the path's ceiling, and a trial that holds
        # more is past it, no error of the model (tuner/_search/_request_path.py), as the tuner says.
        assert ratio >= 1 - PREDICTION_TOLERANCE, (ratio, lines)
        if ratio > 1 + PREDICTION_TOLERANCE:
            assert "past the request path's calibrated capacity" in proc.stdout, lines
    else:
        assert abs(ratio - 1) <= MEASURED_SPREAD, (ratio, lines)
        _checks_follow_the_tolerances(proc.stdout, lines)

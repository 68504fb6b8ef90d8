"""perfkit tune's predicted search ranked by an objective other than throughput, against a real
Triton: --search auto predicts a per-instance tune. On the known-truth hungry fixture (one
emulated device shared by every instance: two instances take turns and complete no more than
one), the predictions rank one instance first per instance, the tune measures the chosen points
and recommends one instance, the known best per instance."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfkit.records import TuneRecord

pytestmark = [pytest.mark.usefixtures("tritonserver"), pytest.mark.slow]


def test_a_per_instance_tune_is_predicted_and_picks_one_instance_on_a_shared_device(model_repo: Path, tmp_path: Path):
    out = tmp_path / "out"
    # No batching (a batch of one takes 30 ms on the shared device), one or two instances, open loop.
    cmd = [sys.executable, "-m", "perfkit", "tune", "-m", "hungry", "--model-repository", str(model_repo), "-o",
           str(out), "--objective", "per-instance", "--no-dynamic-batching", "--max-batch-sizes", "8",
           "--instance-counts", "1,2", "--precisions", "fp32", "--latency-budget", "300ms", "--trials", "3",
           "--measurement-interval", "400", "--confirm", "0"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = "\n".join(line for line in proc.stdout.splitlines() if "calibrated" in line or "trial" in line)
    assert "--search auto: predicting" in proc.stdout, proc.stdout
    rec = TuneRecord.load(out / "tune.json")
    assert rec.search == "predict" and rec.calibration is not None
    # the instances take turns on the device: the calibration says so
    assert rec.calibration.shared_fraction >= 0.6, lines
    # every trial of the space measured (the original, one instance, and the two-instance point queued
    # with its prediction), each per instance as the trial counts it
    assert {t.params.get("instance_count") for t in rec.trials if t.feasible} == {1, 2}, lines
    units = {t.params.get("instance_count"): t.metrics.get("hardware_units") for t in rec.trials}
    assert units == {1: 1.0, 2: 2.0}, units
    best = rec.best()
    assert best is not None and best.params.get("instance_count") == 1, lines  # the known best per instance

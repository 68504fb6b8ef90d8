"""`perfkit plan` from a real predicted tune: the queue fixture (10 ms per execution, instances
that hardly contend) tuned with --search predict on a real Triton, then planned for configs the
tune never measured (three instances; the best of the predicted space), the predicted plan shown
beside the measured one with its calibration error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfkit.records import TuneRecord

pytestmark = [pytest.mark.usefixtures("tritonserver"), pytest.mark.slow]


def test_a_predicted_tune_plans_configs_it_never_measured(model_repo: Path, tmp_path: Path):
    out = tmp_path / "out"
    # The cheap predicted tune of tests/server/tuner/test_tune_predict.py: two configs (1 or 2
    # instances), short windows, no confirmation runs.
    tune = [sys.executable, "-m", "perfkit", "tune", "-m", "queue", "--model-repository", str(model_repo), "-o",
            str(out), "--search", "predict", "--instance-counts", "1,2", "--measurement-interval", "400", "--confirm",
            "0", "--latency-budget", "100ms", "--trials", "2"]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(tune, capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rec = TuneRecord.load(out / "tune.json")
    assert rec.calibration is not None
    measured_counts = {t.params.get("instance_count") for t in rec.trials}
    assert 3 not in measured_counts  # three instances: never measured

    def plan(*extra: str) -> dict:
        cmd = [sys.executable, "-m", "perfkit", "plan", str(out), "--target-rate", "1000/s", "--json", *extra]
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
        return json.loads(p.stdout)

    three = plan("--instance-counts", "3")
    pred = three["predicted"]
    assert pred["predicted"] is True and pred["config"]["instance_count"] == 3
    assert pred["calibration_error_rel"] == pytest.approx(rec.calibration.fit_max_rel)
    low, high = pred["replicas_range"]
    assert low <= pred["replicas"] <= high
    # The queue fixture's instances each carry at most 1/D = ~100 req/s (D >= 10 ms measured):
    # three carry under 300, so 1,300 req/s with headroom needs more than 4 replicas.
    assert pred["sustainable_rps"] <= 3 * 1e6 / rec.calibration.fixed_us and pred["replicas"] >= 5
    # The measured plan is there too, as before (the tune recommends a measured config).
    if rec.best() is not None:
        assert three["replicas"] >= 1 and "evidence" in three
    # The whole predicted space: its best has at least as many instances as the tune measured best.
    best = plan("--predict")["predicted"]
    assert best["configs_scored"] > 1 and best["sustainable_rps"] >= pred["sustainable_rps"] * 0.9

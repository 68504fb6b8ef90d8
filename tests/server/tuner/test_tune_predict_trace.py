"""perfkit tune's predicted search of a trace tune (--load trace: the trace replayed faster or
slower) against a real Triton: --search auto predicts it from the trace's own arrival times. On
the known-truth queue fixture (10 ms deterministic service, instances that do not contend), two
instances sustain the trace sped up about twice as far as one: the predicted best and the pick
are two instances, and the pick's measured mean rate is within the stated tolerance of its
prediction."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from perfkit.records import TuneRecord

pytestmark = [pytest.mark.usefixtures("tritonserver"), pytest.mark.slow]

# The stated tolerance of this test, as the open-loop predicted tune's (tests/server/tuner/test_tune_predict.py):
# a trace replayed once reads its p99 over a few hundred requests, on 2 cores shared with busy jobs.
MEASURED_SPREAD = 0.6


def test_a_trace_tune_is_predicted_from_the_traces_arrivals_and_picks_the_known_best(model_repo: Path, tmp_path: Path):
    rng = random.Random(5)
    t, lines = 0.0, []
    for i in range(400):  # Poisson arrivals at 40 req/s over ~10 s
        t += rng.expovariate(40.0) * 1e3
        lines.append(json.dumps({"timestamp": round(t, 3), "inputs": {"INPUT0": [float(i)]}}))
    trace = tmp_path / "trace.jsonl"
    trace.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "perfkit", "tune", "-m", "queue", "--model-repository", str(model_repo), "-o",
           str(out), "--load", "trace", "--trace", str(trace), "--instance-counts", "1,2", "--latency-budget", "100ms",
           "--trials", "3", "--measurement-interval", "400", "--confirm", "0"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines_out = "\n".join(line for line in proc.stdout.splitlines() if "calibrated" in line or "trial" in line)
    assert "--search auto: predicting" in proc.stdout and "trace replay" in proc.stdout, proc.stdout
    rec = TuneRecord.load(out / "tune.json")
    assert rec.search == "predict" and rec.calibration is not None
    predicted = [t for t in rec.trials if "predicted_rps" in t.metrics]
    assert predicted and predicted[0].params.get("instance_count") == 2, lines_out
    first = predicted[0]
    assert first.feasible and first.load is not None and first.load.mode == "trace", lines_out
    assert first.throughput_infer_per_s is not None
    ratio = first.load.value / first.metrics["predicted_rps"]  # the mean rate held against the predicted
    assert abs(ratio - 1) <= MEASURED_SPREAD, (ratio, lines_out)
    best = rec.best()
    assert best is not None and best.params.get("instance_count") == 2, lines_out

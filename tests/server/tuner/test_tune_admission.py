"""A tune with an error budget on the admission fixture (10 ms a request, one at a time: an M/D/1
queue unbounded, M/D/1/K bounded): under Poisson load past the knee the bounded queue holds the
budget at a stated rejection rate and carries more successful requests than the unbounded one,
whose queue grows past the budget first; the tune picks it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfkit.records import TuneRecord

pytestmark = [pytest.mark.usefixtures("tritonserver"), pytest.mark.slow]

BUDGET_MS = 80.0
MAX_ERROR_RATE = 0.05
# Five queued and one executing: an admitted request waits at most five services (~55 ms with the
# backend's own cost), within the budget at any rate; M/D/1/6 rejects at most 5% up to about 0.9 of
# the fixture's capacity. Unbounded, M/D/1's p99 passes 80 ms near 0.65 of it.
BOUND = 5


@pytest.mark.quiet
def test_tune_with_an_error_budget_picks_a_bounded_queue_that_holds_the_budget(model_repo: Path, tmp_path: Path):
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "perfkit", "tune", "-m", "admission", "--model-repository", str(model_repo),
           "-o", str(out), "--latency-budget", f"{BUDGET_MS:g}ms", "--max-error-rate", f"{MAX_ERROR_RATE:g}",
           "--max-queue-sizes", f"0,{BOUND}", "--queue-timeouts", "none", "--instance-counts", "1",
           "--max-batch-sizes", "1", "--dynamic-batching", "--queue-delays-us", "0", "--preferred-batch-sizes",
           "none", "--search", "measure", "--sampler", "grid", "--trials", "3", "--measurement-interval", "1000",
           "--confirm", "0"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The original config is put back as it was.
    assert "default_queue_policy" not in (model_repo / "admission" / "config.pbtxt").read_text()
    rec = TuneRecord.load(out / "tune.json")
    assert rec.budget.max_error_rate == pytest.approx(MAX_ERROR_RATE)
    measured = {t.params.get("max_queue_size"): t for t in rec.trials if t.throughput_infer_per_s}
    assert set(measured) == {0, BOUND}, [t.params for t in rec.trials]
    bounded, unbounded = measured[BOUND], measured[0]
    best = rec.best
    assert best is not None and best.params.get("max_queue_size") == BOUND, proc.stdout
    # The pick holds the budget and says what it gave up for it: rejections within the error budget.
    assert best.latency_us is not None and best.latency_us <= BUDGET_MS * 1e3
    rejected = bounded.metrics.get("rejection_rate", 0.0)
    assert 0 < rejected <= MAX_ERROR_RATE, bounded.metrics
    assert "% rejected" in proc.stdout
    # Its sustainable rate counts successes only and beats the unbounded queue's, which fails the budget
    # at the bounded one's load.
    assert bounded.throughput_infer_per_s > unbounded.throughput_infer_per_s
    assert unbounded.load is None or unbounded.load.value < bounded.load.value

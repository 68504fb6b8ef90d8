"""A tune with an error budget on the admission fixture (10 ms a request, one at a time): the queue
policy is searched, every rejection of a bounded queue is counted in its trial's levels, a level
counts only within the error budget, and the pick is the trial serving the most successful
requests within both budgets.

Which config wins is the server's answer, not the test's: on the bundled Triton a queue policy turns
the batcher's prefetching off and the batcher then waits for an arrival (or its 500 ms poll) before
it hands an idle instance the next queued request (triton-inference-server/core
src/dynamic_batch_scheduler.cc, BatcherThread's default_wait_microseconds and
WaitForPayloadSlotAvailable), which can cost a bounded queue more than it saves
(benchmarks/results/admission-2026-12-02.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfkit.records import Budget, RunRecord, TuneRecord

pytestmark = [pytest.mark.usefixtures("tritonserver"), pytest.mark.slow]

BUDGET_MS = 80.0
MAX_ERROR_RATE = 0.05
BOUND = 5  # five queued and one executing: M/D/1/6 by the queueing model


@pytest.mark.quiet
@pytest.mark.timeout(1200)  # three trials' load searches, one on a stalling batcher, on a shared machine
def test_tune_with_an_error_budget_counts_rejections_and_picks_within_both_budgets(model_repo: Path, tmp_path: Path):
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "perfkit", "tune", "-m", "admission", "--model-repository", str(model_repo),
           "-o", str(out), "--latency-budget", f"{BUDGET_MS:g}ms", "--max-error-rate", f"{MAX_ERROR_RATE:g}",
           "--max-queue-sizes", f"0,{BOUND}", "--queue-timeouts", "none", "--instance-counts", "1",
           "--max-batch-sizes", "1", "--dynamic-batching", "--queue-delays-us", "0", "--preferred-batch-sizes",
           "none", "--search", "measure", "--sampler", "grid", "--trials", "3", "--measurement-interval", "1000",
           "--confirm", "0", "--max-time", "12m"]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1100)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "search max_queue_size {0, 5}" in proc.stdout, proc.stdout
    # The original config is put back as it was.
    assert "default_queue_policy" not in (model_repo / "admission" / "config.pbtxt").read_text()
    rec = TuneRecord.load(out / "tune.json")
    assert rec.budget.max_error_rate == pytest.approx(MAX_ERROR_RATE)
    bounded = [t for t in rec.trials if t.params.get("max_queue_size") == BOUND]
    # Measured: complete, or pruned where its p99 at the least load already broke the budget (the
    # server's batcher stall under a queue policy, see the module docstring).
    assert len(bounded) == 1 and bounded[0].state in ("complete", "pruned"), proc.stdout
    budget = Budget(BUDGET_MS, max_error_rate=MAX_ERROR_RATE)
    run = RunRecord.load(out / "runs" / f"trial-{bounded[0].number:03d}.json")
    assert run.levels
    for lv in run.levels:
        # Every failure of the bounded queue is the server's rejection, counted as one; a level past
        # the error budget never counts, however fast its admitted requests were.
        assert lv.rejected_count == lv.error_count, lv.errors
        if lv.rejection_rate > MAX_ERROR_RATE:
            assert not budget.within(lv)
    # The pick serves the most successful requests of the trials within both budgets.
    best = rec.best()
    assert best is not None
    feasible = [t for t in rec.trials if t.feasible and t.throughput_infer_per_s]
    assert best.throughput_infer_per_s == max(t.throughput_infer_per_s or 0.0 for t in feasible)
    assert best.latency_us is not None and best.latency_us <= BUDGET_MS * 1e3
    assert best.metrics.get("rejection_rate", 0.0) <= MAX_ERROR_RATE

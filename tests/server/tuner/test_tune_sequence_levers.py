"""The sequence batcher's strategy on the real server, for a case whose answer is known: the
accumulator (one execution sleeps 1 ms whatever its batch, max_batch_size 4, one instance) under
8 closed-loop clients, each holding one sequence of 20 steps.

Direct gives each sequence a batch slot for its whole life: 4 slots, so 4 of the 8 sequences
wait in the backlog until a sequence ends (20 steps), and a slot whose sequence's next step is
still on its way back from the client runs empty. Oldest-first keeps all 8 as candidates and
batches whichever 4 are ready. So oldest completes more within the budget, and the tune must pick
it (Triton core src/sequence_batch_scheduler/sequence_batch_scheduler.cc: DirectSequenceBatch
binds a sequence to a slot, OldestSequenceBatch forms batches from the oldest ready candidates)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfkit.records import TuneRecord
from perfkit.server.modelconfig import read_config

pytestmark = [pytest.mark.usefixtures("tritonserver"), pytest.mark.slow]

# every other sequence knob held at one value: the two trials differ in the strategy alone
FIX = (
    "max_batch_size=4,max_sequence_idle_us=5000000,sequence_max_queue_delay_us=0,max_candidate_sequences=8,"
    "sequence_preferred_batch_sizes=max,minimum_slot_utilization=0"
)


def test_tune_picks_oldest_first_when_direct_slots_leave_sequences_waiting(model_repo: Path, tmp_path: Path):
    cfg_path = model_repo / "accumulator" / "config.pbtxt"
    original = cfg_path.read_bytes()
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "perfkit", "tune", "-m", "accumulator", "--model-repository", str(model_repo),
           "-o", str(out), "--search", "measure", "--sampler", "grid", "--trials", "2", "--latency-budget", "100ms",
           "--load", "concurrency", "--max-concurrency", "8", "--measurement-interval", "1000",
           "--instance-counts", "1", "--fix", FIX, "--confirm", "0"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}, timeout=400)
    assert done.returncode == 0, done.stdout + done.stderr
    assert cfg_path.read_bytes() == original
    rec = TuneRecord.load(out / "tune.json")
    by_strategy = {t.params["sequence_strategy"]: t for t in rec.trials if t.state == "complete"}
    assert set(by_strategy) == {"direct", "oldest"}, rec.trials
    direct, oldest = by_strategy["direct"], by_strategy["oldest"]
    assert oldest.feasible and oldest.throughput_infer_per_s is not None
    # the structural gap: direct's empty slots and its backlog cost it a share of what oldest completes
    assert direct.throughput_infer_per_s is None or oldest.throughput_infer_per_s > 1.15 * direct.throughput_infer_per_s
    assert rec.trial(rec.best_trial).params["sequence_strategy"] == "oldest"
    best = read_config(out / "best" / "config.pbtxt")
    assert best.sequence_batching.HasField("oldest") and best.sequence_batching.oldest.max_candidate_sequences == 8

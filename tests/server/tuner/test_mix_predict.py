"""perfkit tune --search auto on a traffic mix against a real Triton: `batcher` and `hungry` share one
emulated device (the same cross-process lock in their model.py, fixtures/models), each calibrated
alone, the contention between them measured with both loaded at once, every pair of configs
simulated together, the best predicted pair measured first; the measured best is within the
test's stated tolerance of its prediction and is the pair the fixtures' known service models
make best.

The known best: on the shared device a hungry execution holds it for 30 ms + 0.3 ms an item and a
batcher execution for 2 ms + 0.25 ms an item (fixtures/models/*/config.pbtxt); with budgets loose
enough that the device, not the latency, bounds the mix, the total rate is about the device's
time per request at the mix's weights: batching both (max_batch_size 8) spends ~1.4 ms of it per
request, batching hungry alone ~2.7 ms, batching neither ~9 ms. Batching both is best by ~2x.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfkit.records import TuneRecord
from tests.conftest import copy_models

pytestmark = [pytest.mark.usefixtures("tritonserver"), pytest.mark.slow]

MODELS = ("batcher", "hungry")
# The stated tolerance of this test on a 2-core machine shared with other jobs (as the ensemble's
# predicted tune states it): the measured best within 60% of its prediction; the tuner's own
# tolerance (25%) decides the search.
MEASURED_SPREAD = 0.6
# A cheap space: batching on or off per model at max_batch_size 8, the queue delay fixed, one
# instance, at the shipped precision: four pairs, the best known (see the module's docstring). No
# confirmation: the pick asserted is the search's (a confirmation near the budget on a loaded
# machine may step the best down, which is the measured search's and not what this test holds).
MIX = ["-m", "batcher", "-m", "hungry", "--mix", "batcher:3,hungry:1",
       "--latency-budget", "batcher:150ms,hungry:250ms", "--max-batch-sizes", "8", "--instance-counts", "1",
       "--queue-delays-us", "2000", "--preferred-batch-sizes", "none", "--precisions", "fp32",
       "--measurement-interval", "400", "--confirm", "0"]  # fmt: skip


def test_predicted_mix_tune_calibrates_each_model_measures_their_contention_and_picks_the_known_best(tmp_path: Path):
    repo = copy_models(tmp_path, list(MODELS))
    before = {m: (repo / m / "config.pbtxt").read_bytes() for m in MODELS}
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "perfkit", "tune", "--model-repository", str(repo), "-o", str(out),
           "--trials", "4", *MIX]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}, timeout=900)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text
    assert {m: (repo / m / "config.pbtxt").read_bytes() for m in MODELS} == before  # every calibration put back
    assert "--search auto: predicting" in proc.stdout, text
    assert "calibrated the mix's 2 models in" in proc.stdout and "together at " in proc.stdout, text
    rec = TuneRecord.load(out / "tune.json")
    assert rec.search == "predict"
    cal = rec.calibration
    assert cal is not None and [c.model for c in cal.steps] == list(MODELS), cal
    batcher, hungry = cal.steps
    # each calibrated alone, batched on purpose up to 8: hungry's fixed cost is the large one
    assert {p.batch_size for p in hungry.points} >= {1, 8}, hungry
    assert hungry.fixed_us > 3 * batcher.fixed_us, cal.steps
    # the contention measured: the two share one device (the fixtures' one lock), most of each execution on it
    assert cal.shared_fraction > 0.5, cal
    assert "one device shared by the models" in proc.stdout, text
    predicted = [t for t in rec.trials if "predicted_rps" in t.metrics and t.feasible]
    assert predicted, text
    best_predicted = max(predicted, key=lambda t: t.metrics["predicted_rps"])
    assert best_predicted.params.get("hungry.dynamic_batching") is True, best_predicted.params
    assert best_predicted.params.get("batcher.dynamic_batching") is True, best_predicted.params
    assert best_predicted.throughput_infer_per_s is not None
    ratio = best_predicted.throughput_infer_per_s / best_predicted.metrics["predicted_rps"]
    assert abs(ratio - 1) <= MEASURED_SPREAD, (ratio, text)
    # the pick is the known best pair
    assert rec.best_trial is not None, text
    best = next(t for t in rec.trials if t.number == rec.best_trial)
    assert best.params.get("hungry.dynamic_batching") is True and best.params.get("batcher.dynamic_batching") is True
    assert "their predictions held" in proc.stdout or "going on with the measured search" in proc.stdout, text

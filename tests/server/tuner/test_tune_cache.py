"""perfkit tune searches the response cache for a workload whose repeats are stated: on the
cacheable fixture (10 ms an execution, one instance) at a 50% repeat rate the cache is picked and
the rate it sustains is about twice the rate without it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfkit.records import RunRecord, TuneRecord, from_dict

pytestmark = [pytest.mark.usefixtures("tritonserver"), pytest.mark.slow]


def _tune(repo: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "perfkit", "tune", "-m", "cacheable", "--model-repository", str(repo), "-o",
           str(out), *extra]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}, timeout=540)


# quiet: which config holds a latency budget at the higher rate is a verdict on measurement noise
@pytest.mark.quiet
def test_a_stated_50_percent_repeat_rate_turns_the_cache_on_at_about_twice_the_rate(model_repo: Path, tmp_path):
    out = tmp_path / "out"
    original = (model_repo / "cacheable" / "config.pbtxt").read_text()
    proc = _tune(model_repo, out, "--repeat-fraction", "0.5", "--latency-budget", "60ms", "--instance-counts", "1",
                 "--precisions", "fp32", "--trials", "2", "--confirm", "0", "--search", "measure")  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (model_repo / "cacheable" / "config.pbtxt").read_text() == original  # the user's file is left as it was
    rec = from_dict(TuneRecord, json.loads((out / "tune.json").read_text()))
    by_cache = {t.params.get("response_cache"): t for t in rec.trials if t.feasible}
    assert set(by_cache) == {False, True}, [(t.params, t.feasible) for t in rec.trials]
    best = rec.trial(rec.best_trial)
    assert best is not None and best.params["response_cache"] is True
    off = by_cache[False].throughput_infer_per_s or 0.0
    on = by_cache[True].throughput_infer_per_s or 0.0
    # One instance at 10 ms: at most 100 req/s without the cache (less within a p99 budget, which
    # holds the instance below its knee); half the requests answered from the cache leave the instance
    # the other half, so well above the rate without it and never past twice the instance's capacity.
    assert on / off >= 1.5 and on <= 2 * 100 * 1.1, (on, off)
    # The cache-on trial's runs: the repeats sent as stated, the cache hit on about half.
    run = RunRecord.load(out / "runs" / f"trial-{by_cache[True].number:03d}.json")
    assert run.repeats is not None and run.repeats.fraction_sent == pytest.approx(0.5, abs=1e-3)
    served = [lv.server for lv in run.levels if lv.server is not None and lv.server.request_count > 50]
    assert served and all(0.4 <= s.cache_hit_count / s.request_count <= 0.55 for s in served)

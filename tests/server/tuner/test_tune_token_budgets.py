"""perfkit tune on a decoupled generator under token budgets, searching an engine parameter of its
config.pbtxt beside its instance count, with goodput as the objective.

The streamer fixture's per-token time is its `token_ms` parameter (plus `token_ms_per_stream` per other
stream in flight): listing token_ms 2 and 20 beside its own 5 gives a space whose answer is known. Under
an ITL budget of 15 ms, token_ms 20 can never hold it (every gap is at least 20 ms), and of those that
do, token_ms 2 finishes each 16-token stream soonest, so the most requests per second meet the SLOs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfkit.records import RunRecord, TuneRecord
from perfkit.server.modelconfig import read_config
from tests.conftest import CHEAP_CONFIRM

pytestmark = [pytest.mark.usefixtures("tritonserver"), pytest.mark.slow]


@pytest.mark.quiet  # the pick among feasible trials is a verdict on measured goodput
def test_a_goodput_tune_under_an_itl_budget_picks_the_known_best_engine_parameter(model_repo: Path, tmp_path: Path):
    cfg_path = model_repo / "streamer" / "config.pbtxt"
    original = cfg_path.read_bytes()
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "perfkit", "tune", "-m", "streamer", "--model-repository", str(model_repo),
           "-o", str(out), "--latency-budget", "itl:15ms", "--objective", "goodput", "--goodput", "ttft:300ms,itl:15ms",
           "--parameter", "token_ms=2,20", "--instance-counts", "1,2", "--sampler", "grid", "--search", "measure",
           "--trials", "6", "--percentile", "90", "--max-concurrency", "4", "--measurement-interval", "400",
           "--seed", "1",
           *CHEAP_CONFIRM]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert cfg_path.read_bytes() == original  # the user's config is never left changed

    rec = TuneRecord.load(out / "tune.json")
    assert rec.status == "ok" and rec.budget.metric == "itl"
    measured = [t for t in rec.trials if t.state == "complete" and "duplicate_of" not in t.metrics]
    by_value = {}
    for t in measured:
        by_value.setdefault(t.params["parameters"], []).append(t)
        served = read_config(out / "configs" / f"trial-{t.number:03d}.pbtxt")
        token_ms = t.params["parameters"].removeprefix("token_ms=")
        assert served.parameters["token_ms"].string_value == token_ms  # what was asked is what was served
        run = RunRecord.load(out / "runs" / f"trial-{t.number:03d}.json")
        level = next(lv for lv in run.levels if lv.load == t.load)
        assert level.streaming is not None and level.streaming.tpot is not None
        # the measurement moved with the parameter: each stream's mean gap (TPOT) is the fixture's per-token
        # time or more (single gaps can be shorter: a stream that wakes late sends its due tokens at once)
        assert level.streaming.tpot.p50_us / 1e3 >= float(token_ms) * 0.9
    assert {"token_ms=5", "token_ms=2"} <= set(by_value)
    # ITL >= 20 ms never holds a 15 ms budget: tried, and never feasible (the tuner may cut it short)
    twenty = [t for t in rec.trials if t.params.get("parameters") == "token_ms=20"]
    assert twenty and not any(t.feasible for t in twenty)
    best = rec.trial(rec.best_trial)
    assert best is not None and best.feasible and best.params["parameters"] == "token_ms=2"
    assert read_config(out / "best" / "config.pbtxt").parameters["token_ms"].string_value == "2"
    assert "parameters" in (out / "trials.csv").read_text().splitlines()[0].split(",")

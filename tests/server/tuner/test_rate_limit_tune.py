"""Two models on one emulated device, tuned as a traffic mix where Triton's rate limiter decides
which meets its budget (`urgent` and `bulk` fixtures: one cross-process lock every instance of
both takes for its device time; the lock favours neither).

The emulated device runs executions first come first served: without the limiter an urgent
request waits behind every bulk execution queued on the device before it (up to three 30 ms
ones); with every instance claiming the one device unit and urgent's priority the lower, the
rate limiter allocates urgent's instance first whenever it waits (core src/rate_limiter.cc,
ScaledPriority), so it waits for the one running at most, and a higher offered rate keeps
urgent's p99 within its budget.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfkit.cli import main
from perfkit.records import RunRecord
from tests.conftest import copy_models

BUDGETS_MS = {"urgent": 60.0, "bulk": 2000.0}
# Everything but the rate limiter pinned (one batch size, no dynamic batching, the models' own
# three instances), its priorities 0 (no claim), 1 and 4 for each model: nine points, all tried,
# open loop (the rate a budget holds at is what the priority moves).
MIX = ["-m", "urgent", "-m", "bulk", "--mix", "urgent:1,bulk:3",
       "--latency-budget", "urgent:60ms,bulk:2000ms", "--max-batch-sizes", "8", "--instance-counts", "3",
       "--no-dynamic-batching", "--rate-limit-priorities", "0,1,4", "--sampler", "grid", "--trials", "9",
       "--percentile", "95", "--load", "rate", "--measurement-interval", "1000", "--confirm", "0"]  # fmt: skip


def _favours_urgent(params: dict[str, int]) -> bool:
    """bulk claims the device and urgent's priority is not the higher number: at equal priorities
    the limiter already favours urgent, whose instances have run fewer times (ScaledPriority is
    exec_count x priority, and urgent is a quarter of the mix)."""
    pu, pb = params.get("urgent/rate_limit_priority", 0), params.get("bulk/rate_limit_priority", 0)
    return pb > 0 and (pu == 0 or pu <= pb)


@pytest.mark.usefixtures("tritonserver")
@pytest.mark.slow
@pytest.mark.quiet
def test_the_tune_gives_the_urgent_model_the_device_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = copy_models(tmp_path, ["urgent", "bulk"])
    out_dir = tmp_path / "out"
    rc = main(["tune", "--model-repository", str(repo), "-o", str(out_dir), *MIX])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    rec = json.loads((out_dir / "tune.json").read_text())
    trials = {t["number"]: t for t in rec["trials"]}
    best = trials[rec["best_trial"]]
    sep = next(k for k in best["params"] if k.endswith("rate_limit_priority"))[: -len("rate_limit_priority")]
    params = {k.replace(sep, "/"): v for k, v in best["params"].items()}
    assert _favours_urgent(params), printed
    # at the load the pick was credited with, both models within their budgets
    run = RunRecord.load(out_dir / "runs" / f"trial-{best['number']:03d}.json")
    (level,) = [lv for lv in run.levels if lv.load.value == best["load"]["value"]]
    pct = rec["budget"]["percentile"]
    for share in level.models:
        assert share.result.latency().percentile_us(pct) <= BUDGETS_MS[share.model] * 1e3
    # without the limiter (the original, trial 0) urgent is over its budget at a load no higher
    original = RunRecord.load(out_dir / "runs" / "trial-000.json")
    over = [
        lv for lv in original.levels
        if lv.load.value <= best["load"]["value"]
        for s in lv.models
        if s.model == "urgent" and s.result.latency().percentile_us(pct) > BUDGETS_MS["urgent"] * 1e3
    ]  # fmt: skip
    assert over, printed

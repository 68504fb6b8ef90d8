"""perfkit tune on a real Triton server for models that are not request/response: the
decoupled streaming fixture under a TTFT budget (trials judged by the stream's TTFT), and the
stateful accumulator searched over its sequence batcher (never dynamic batching)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfkit.records import RunRecord, TuneRecord
from perfkit.server.modelconfig import config_pbtxt_sha256, parse_config, read_config
from perfkit.tuner import judge_trial
from tests.conftest import CHEAP_CONFIRM

pytestmark = [pytest.mark.usefixtures("tritonserver"), pytest.mark.slow]

# Few trials, a small load range and short windows keep each trial to a few seconds.
FAST = ["--max-concurrency", "4", "--measurement-interval", "300", "--seed", "1", *CHEAP_CONFIRM]


def _tune(repo: Path, out: Path, model: str, budget: str, trials: int, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "perfkit", "tune", "-m", model, "--model-repository", str(repo), "-o", str(out),
           "--latency-budget", budget, "--trials", str(trials), *FAST, *extra]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}, timeout=400)


def test_tune_of_the_streaming_fixture_under_a_ttft_budget(model_repo: Path, tmp_path: Path):
    cfg_path = model_repo / "streamer" / "config.pbtxt"
    original = cfg_path.read_bytes()
    out = tmp_path / "out"
    proc = _tune(model_repo, out, "streamer", "ttft:300ms", trials=3)  # no --load: the default
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert cfg_path.read_bytes() == original
    # the default load of a decoupled model is closed loop (TuneSettings.load_for), said up front
    assert "load: closed loop" in proc.stdout and "(the default; closed loop for a decoupled model)" in proc.stdout

    rec = TuneRecord.load(out / "tune.json")
    assert rec.status == "ok" and rec.budget.metric == "ttft" and rec.budget.latency_budget_ms == 300
    measured = [t for t in rec.trials if t.state == "complete" and "duplicate_of" not in t.metrics]
    assert measured and any(t.is_original for t in measured)
    for t in measured:
        run = RunRecord.load(out / "runs" / f"trial-{t.number:03d}.json")
        assert run.spec.streaming and run.spec.protocol == "grpc"
        assert t.load is not None and t.latency_us is not None and t.load.mode == "concurrency"
        level = next(lv for lv in run.levels if lv.load.value == t.load.value)
        assert level.streaming is not None
        # the trial's latency is its run's TTFT p99 at that load, not the end-to-end request latency
        assert t.latency_us == pytest.approx(level.streaming.ttft.p99_us)
        assert level.streaming.ttft.p99_us < level.latency().p99_us
        assert t.metrics["output_tokens_per_s"] == pytest.approx(level.streaming.output_tokens_per_s)
        verdict = judge_trial(run, latency_budget_ms=300, percentile=99, metric="ttft")
        assert verdict.latency_us == pytest.approx(t.latency_us)
    best = rec.trial(rec.best_trial)
    assert best is not None and best.feasible
    best_cfg = read_config(out / "best" / "config.pbtxt")
    assert config_pbtxt_sha256(best_cfg) == best.config_pbtxt_sha256
    assert best_cfg.model_transaction_policy.decoupled
    assert "TTFT p99" in proc.stdout and "tokens/s" in proc.stdout
    header = (out / "trials.csv").read_text().splitlines()[0].split(",")
    assert "p99_ttft_ms" in header and "p99_latency_ms" not in header


def test_tune_of_a_sequence_model_searches_the_sequence_batcher(model_repo: Path, tmp_path: Path):
    cfg_path = model_repo / "accumulator" / "config.pbtxt"
    original = cfg_path.read_bytes()
    original_cfg = read_config(cfg_path)
    out = tmp_path / "out"
    # closed loop: this test holds the sequence batcher's search, not the load mode
    proc = _tune(model_repo, out, "accumulator", "50ms", 4, "--load", "concurrency")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert cfg_path.read_bytes() == original

    rec = TuneRecord.load(out / "tune.json")
    assert rec.status == "ok" and rec.budget.metric == "latency"
    configs = {t.number: parse_config((out / "configs" / f"trial-{t.number:03d}.pbtxt").read_text())
               for t in rec.trials if t.state == "complete"}  # fmt: skip
    assert len(configs) >= 2
    for cfg in configs.values():
        assert cfg.WhichOneof("scheduling_choice") == "sequence_batching"
        assert not cfg.HasField("dynamic_batching")
        assert list(cfg.sequence_batching.control_input) == list(original_cfg.sequence_batching.control_input)
    assert any(cfg.sequence_batching != original_cfg.sequence_batching for cfg in configs.values())
    for t in rec.trials:
        if t.state == "complete":
            run = RunRecord.load(out / "runs" / f"trial-{t.number:03d}.json")
            assert all(lv.error_count == 0 for lv in run.levels if lv.load == t.load)  # sequences ran whole
    best = rec.trial(rec.best_trial)
    assert best is not None and best.feasible
    assert read_config(out / "best" / "config.pbtxt").HasField("sequence_batching")

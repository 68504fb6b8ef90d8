"""A backend's own threads on the real server (tuner/_space/_knob_backend.py): the onnxruntime model
(fixtures/onnx/onnx_mlp, onnxruntime in the python backend) reads its intra-op thread count from its
config's parameters. The knob's value reaches the runtime in the served instance (its process holds
that many more threads), and `perfkit tune` measures each value of the lever and keeps what it measured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from perfkit.records import TuneRecord, from_dict
from perfkit.server import LocalLaunch, launch_local
from perfkit.server.modelconfig import apply_config, format_config, read_config
from perfkit.tuner import TuneSpace, apply_params, resolve
from tests.conftest import require
from tests.support.onnx_model import add_onnx_model

pytestmark = [pytest.mark.usefixtures("tritonserver")]
WIDE = (64, 2048, 2048, 64)  # benchmarks/backend_threads.py measures the same model


def _onnx_ready() -> None:
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError:
        require("onnx and onnxruntime", None, 'pip install -e ".[dev]"')


def _stub_threads(server_pid: int, model: str) -> list[int]:
    """The thread count of each python backend stub process serving `model` under the server."""
    counts = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            status = (entry / "status").read_text()
        except OSError:
            continue
        ppid = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("PPid:"))
        if ppid == server_pid and "triton_python_backend_stub" in cmdline and f"/{model}/" in cmdline:
            counts.append(next(int(line.split()[1]) for line in status.splitlines() if line.startswith("Threads:")))
    return counts


def _settled_threads(server_pid: int, model: str, instances: int) -> list[int]:
    """The stub threads once the reloaded model has one stub per instance (the old stubs gone)."""
    deadline = time.monotonic() + 30
    while True:
        counts = _stub_threads(server_pid, model)
        if len(counts) == instances or time.monotonic() > deadline:
            return counts
        time.sleep(0.2)


def test_intra_op_threads_reach_onnxruntime_in_the_served_instance(tmp_path: Path):
    _onnx_ready()
    repo = tmp_path / "models"
    model_dir = add_onnx_model(repo)
    path = model_dir / "config.pbtxt"
    cfg = read_config(path)
    rs = resolve(TuneSpace(intra_op_threads=(1, 4)), cfg, model_dir, latency_budget_us=100_000, cpu_cores=2)
    assert rs.dimension("intra_op_threads").choices == (1, 4)
    with launch_local(LocalLaunch(repo, models=("onnx_mlp",))) as server:
        seen = {}
        for threads in (1, 4):
            applied = apply_config(
                server, "onnx_mlp", path, format_config(apply_params(cfg, {"intra_op_threads": threads}, rs))
            )
            assert applied.parameters["intra_op_threads"].string_value == str(threads)
            (seen[threads],) = _settled_threads(server.pid, "onnx_mlp", 1)
    # onnxruntime's intra-op pool of t threads starts t - 1 workers beside the caller's thread
    assert seen[4] - seen[1] == 3, seen


@pytest.mark.slow
def test_tune_measures_each_thread_value_and_keeps_the_one_it_measured_best(tmp_path: Path):
    _onnx_ready()
    repo = tmp_path / "models"
    cfg_path = add_onnx_model(repo, widths=WIDE) / "config.pbtxt"
    original = cfg_path.read_bytes()
    out = tmp_path / "out"
    # one instance, batching on at max_batch_size 32: the grid is the thread values alone, measured
    args = [sys.executable, "-m", "perfkit", "tune", "-m", "onnx_mlp", "--model-repository", str(repo),
            "-o", str(out), "--search", "measure", "--sampler", "grid", "--trials", "3", "--latency-budget", "2000ms",
            "--load", "concurrency", "--max-concurrency", "32", "--measurement-interval", "1000",
            "--max-batch-sizes", "32", "--dynamic-batching", "--queue-delays-us", "500:500",
            "--preferred-batch-sizes", "none", "--instance-counts", "1", "--precisions", "fp32",
            "--intra-op-threads", "1,2", "--confirm", "0"]  # fmt: skip
    done = subprocess.run(
        args, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}, timeout=480
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert cfg_path.read_bytes() == original
    rec = from_dict(TuneRecord, json.loads((out / "tune.json").read_text()))
    measured = [t for t in rec.trials if t.state == "complete" and "duplicate_of" not in t.metrics]
    by_threads = {t.params["intra_op_threads"]: t for t in measured}
    assert set(by_threads) == {1, 2}, rec.trials
    assert all(t.feasible and t.throughput_infer_per_s for t in by_threads.values())
    best = next(t for t in rec.trials if t.number == rec.best_trial)
    # the pick is the value measured best, and what is written is that value
    assert best.throughput_infer_per_s == max(t.throughput_infer_per_s for t in by_threads.values())
    best_cfg = read_config(out / "best" / "config.pbtxt")
    assert best_cfg.parameters["intra_op_threads"].string_value == str(best.params["intra_op_threads"])
    df = pd.read_csv(out / "trials.csv")
    assert "intra_op_threads" in df.columns and set(df["intra_op_threads"].dropna()) == {1, 2}


@pytest.mark.slow
def test_predicted_tune_calibrates_a_curve_per_thread_value_and_says_it_measured_them(tmp_path: Path):
    _onnx_ready()
    repo = tmp_path / "models"
    add_onnx_model(repo, widths=WIDE)
    out = tmp_path / "out"
    # --search auto on an open-loop tune of one model: predicted, the thread values calibrated
    args = [sys.executable, "-m", "perfkit", "tune", "-m", "onnx_mlp", "--model-repository", str(repo),
            "-o", str(out), "--trials", "2", "--latency-budget", "200ms", "--measurement-interval", "400",
            "--max-batch-sizes", "32", "--dynamic-batching", "--preferred-batch-sizes", "none",
            "--instance-counts", "1", "--precisions", "fp32", "--intra-op-threads", "1,2",
            "--confirm", "0"]  # fmt: skip
    done = subprocess.run(
        args, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "--search auto: predicting" in done.stdout, done.stdout
    assert "intra_op_threads: measured, not simulated" in done.stdout, done.stdout
    rec = from_dict(TuneRecord, json.loads((out / "tune.json").read_text()))
    cal = rec.calibration
    assert cal is not None and cal.value == "intra_op_threads=1", done.stdout
    assert [c.value for c in cal.values] == ["intra_op_threads=2"], done.stdout
    assert cal.values[0].points, cal.values[0]  # measured on the server at 2 threads
    best = rec.best()
    assert best is not None and best.params.get("intra_op_threads") in (1, 2)
    best_cfg = read_config(out / "best" / "config.pbtxt")
    assert best_cfg.parameters["intra_op_threads"].string_value == str(best.params["intra_op_threads"])

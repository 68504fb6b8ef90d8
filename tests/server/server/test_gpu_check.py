"""scripts/gpu_check.sh in its no-GPU form, so that it cannot rot before a GPU machine is at hand:
the pack is built (quickly: gzip, no wheels), every step that needs no GPU runs from the pack's
tritonserver and passes, and each step that needs a GPU is named as skipped."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from perfkit.records import RunRecord, TuneRecord, from_dict
from tests.conftest import ROOT

pytestmark = [pytest.mark.usefixtures("tritonserver"), pytest.mark.slow]


def test_gpu_check_without_a_gpu_runs_every_other_step_and_names_the_skipped(tmp_path: Path):
    ver = f"{sys.version_info.major}.{sys.version_info.minor}"
    pack = tmp_path / "pack.tar.gz"
    built = subprocess.run(
        ["bash", "scripts/gpu_pack.sh", "--out", str(pack), "--no-wheels", "--fast", "--stubs", f"3.12 {ver}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout + built.stderr
    assert "tritonserver, stubs for 3.12" in built.stdout

    out = tmp_path / "check"
    check = ["bash", "scripts/gpu_check.sh", "--pack", str(pack), "--out", str(out), "--python", sys.executable]
    done = subprocess.run([*check, "--no-gpu"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["gpu"] is False
    statuses = {s["step"]: s["status"] for s in summary["steps"]}
    assert statuses == {
        "unpack": "ok",
        "imports": "ok",
        "triton-libs": "ok",
        "stub-numpy": "ok",
        "outputs": "ok",
        "profile-identity": "ok",
        "profile-cuda-shm-gpu-metrics": "skipped",
        "profile-system-shm-metrics": "ok",
        "tune-per-gpu": "skipped",
        "tune-cpu-instances": "ok",
    }
    skipped = {s["step"]: s["note"] for s in summary["steps"] if s["status"] == "skipped"}
    assert all("no GPU" in note for note in skipped.values())
    text = (out / "summary.md").read_text()
    assert all(f"| {name} | skipped |" in text for name in skipped)
    assert "skipped: profile-cuda-shm-gpu-metrics tune-per-gpu" in done.stderr

    # each model answered with numpy's numbers, read from a body of the right size
    answers = (out / "logs" / "outputs.log").read_text()
    assert "ok     gpu_identity: OUTPUT0 FP32 shape [4, 16] binary_data_size 256" in answers
    assert "ok     gpu_matmul: OUTPUT0 FP32 shape [4, 1024] binary_data_size 16384" in answers

    # the records are perfkit's own, read back whole
    for name in ("profile-gpu_identity.json", "profile-gpu_matmul-system-shm.json"):
        rec = from_dict(RunRecord, json.loads((out / "records" / name).read_text()))
        assert rec.status == "ok" and rec.levels and all(lv.throughput_infer_per_s > 0 for lv in rec.levels)
    tune = from_dict(TuneRecord, json.loads((out / "records" / "tune-cpu-instances" / "tune.json").read_text()))
    assert tune.status == "ok" and tune.objective == "throughput"
    assert {t.params.get("instance_count") for t in tune.trials if t.state == "complete"} >= {1, 2, 3}
    # the computing model says what it computed with: numpy, on the CPU instances of the stand-in
    notes = [json.loads(p.read_text()) for p in (out / "model-notes").glob("gpu_matmul-*.json")]
    assert notes and all(n["kind"] == "CPU" and n["library"] == "numpy" and n["numpy"] for n in notes)

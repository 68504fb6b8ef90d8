"""scripts/gpu_check.sh in its no-GPU form, run as the bare GPU machine it is built for would run it,
so that it cannot rot before a GPU machine is at hand: the full pack is built as a GPU machine gets it
(every wheel; gzip for speed), and run on a Python 3.12 of its own that has numpy and
nothing else (the GPU machine's Python: perfkit's dependencies come from the pack alone); every step
that needs no GPU runs from the pack's tritonserver and passes, and each step that needs a GPU is
named as skipped."""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from perfkit.records import RunRecord, TuneRecord, from_dict
from tests.conftest import ROOT, require

pytestmark = [pytest.mark.usefixtures("tritonserver"), pytest.mark.slow]

BARE = ROOT / "build" / "bare-py312"  # kept between runs (build/ is ignored): pip installs numpy once


def _python312() -> str | None:
    """A CPython 3.12 interpreter on this machine besides the project's that runs: on PATH, pyenv's, or uv's."""
    pyenv = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12")))
    found = [shutil.which("python3.12"), *pyenv]
    uv = shutil.which("uv")
    if uv:
        done = subprocess.run([uv, "python", "find", "3.12"], capture_output=True, text=True, check=False)
        found.append(done.stdout.strip() if done.returncode == 0 else None)
    return next((p for p in found if p and _runs(p)), None)


def _runs(python: str) -> bool:
    """Whether the interpreter answers as a 3.12: a pyenv shim on PATH names a version that is not
    pyenv's global one and exits 127."""
    check = [python, "-c", "import sys; sys.exit(sys.version_info[:2] != (3, 12))"]
    return subprocess.run(check, capture_output=True, check=False, timeout=60).returncode == 0


DISTRIBUTIONS = "import importlib.metadata as m; print(sorted({d.metadata['Name'].lower() for d in m.distributions()}))"


def _bare_python312() -> Path:
    """A venv of a Python 3.12 with numpy and nothing else (pip aside), made once; fails if it holds more."""
    python = BARE / "bin" / "python"
    if not python.is_file():
        base = _python312()
        require("a Python 3.12 interpreter", base, "pyenv install 3.12, or uv python install 3.12")
        assert base is not None
        subprocess.run([base, "-m", "venv", "--clear", str(BARE)], check=True, timeout=300)
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "numpy"]
        done = subprocess.run(pip, capture_output=True, text=True, timeout=600, check=False)
        if done.returncode != 0:
            shutil.rmtree(BARE, ignore_errors=True)
            pytest.fail(f"pip could not install numpy in a Python 3.12 venv:\n{done.stdout}{done.stderr}")
    # -I: this checkout's perfkit.egg-info (the working directory) is not the venv's
    listed = subprocess.run([str(python), "-I", "-c", DISTRIBUTIONS], capture_output=True, text=True, timeout=60)
    assert listed.stdout.strip() == "['numpy', 'pip']", f"{BARE} is not bare: {listed.stdout}"
    return python


def test_gpu_check_without_a_gpu_runs_every_other_step_and_names_the_skipped(tmp_path: Path):
    python = _bare_python312()
    pack = tmp_path / "gpu-pack.tar.gz"
    # every wheel, as a GPU machine gets them; --fast: gzip instead of xz (the same files, in a minute
    # rather than several; gpu_pack.sh holds an xz pack to its size limit)
    built = subprocess.run(
        ["bash", "scripts/gpu_pack.sh", "--out", str(pack), "--stubs", "3.12", "--fast"],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout + built.stderr
    assert re.search(r"tritonserver, stubs for 3\.12, \d+ wheels", built.stdout), built.stdout

    out = tmp_path / "check"
    check = ["bash", "scripts/gpu_check.sh", "--pack", str(pack), "--out", str(out), "--python", str(python)]
    # the check's own environment: none of the project's (no venv on PATH, no PYTHONPATH but the pack's)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    done = subprocess.run([*check, "--no-gpu"], cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
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

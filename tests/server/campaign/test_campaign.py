"""`perfkit run` end to end: the dogfood sweep's gate catches a real 2x slowdown of the sleeper."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from perfkit.cli import main
from tests.conftest import copy_models

pytestmark = [pytest.mark.usefixtures("tritonserver"), pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]


def test_ci_smoke_gate_catches_a_2x_slowdown(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the HTML reports go to ./reports/
    repo = copy_models(tmp_path, ["sleeper"])
    cfg = repo / "sleeper" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace('string_value: "10"', 'string_value: "20"'))
    smoke = (ROOT / "sweeps" / "ci-smoke.toml").read_text()
    sweep = (
        smoke.replace('model_repository = "../fixtures/models"', f'model_repository = "{repo}"')
        .replace('baseline = "baselines/ci-smoke/"', f'baseline = "{ROOT / "sweeps" / "baselines" / "ci-smoke"}/"')
        .replace('[[models]]\nname = "batcher"', "")
        .replace('junit = "../.perfkit/ci-smoke/gate.xml"', 'junit = "out/gate.xml"\njson = "out/gate.json"')
        .replace('dir = "../.perfkit/ci-smoke"', 'dir = "out"')
        .replace('store = "../.perfkit/results.sqlite"', 'store = "results/"')
    )
    assert 'name = "batcher"' not in sweep and str(repo) in sweep
    path = tmp_path / "smoke.toml"
    path.write_text(sweep)
    rc = main(["run", str(path)])
    captured = capsys.readouterr()
    out = captured.out
    assert rc == 10, captured.err
    assert "sleeper" in out and "REGRESSION" in out
    assert (tmp_path / "out" / "sleeper.json").is_file()
    assert list((tmp_path / "results").glob("sleeper-*.json"))  # saved to the directory store
    doc = json.loads((tmp_path / "out" / "gate.json").read_text())
    regressed = {f["metric"] for r in doc["results"] for f in r["findings"] if f["verdict"] == "regression"}
    assert {"throughput", "p50"} <= regressed
    assert ET.parse(tmp_path / "out" / "gate.xml").getroot().get("failures") != "0"
    assert (tmp_path / "reports" / "out.html").is_file() and (tmp_path / "reports" / "out-gate.html").is_file()


def test_copy_repository_serves_and_tunes_a_copy_leaving_the_original_untouched(tmp_path, capsys):
    repo = copy_models(tmp_path, ["sleeper"])
    original = (repo / "sleeper" / "config.pbtxt").read_bytes()
    path = tmp_path / "copy.toml"
    path.write_text(
        f'name = "copy"\n[server]\nmodel_repository = "{repo}"\ncopy_repository = true\n'
        "[load]\nlevels = [1]\nmeasurement_interval_ms = 300\nmax_trials = 2\nmin_windows = 2\n"
        '[[models]]\nname = "sleeper"\n'
        '[tune]\nlatency_budget = "50ms"\ntrials = 2\nload = "concurrency"\nmax_concurrency = 2\n'
        "measurement_interval_ms = 300\n"
        'confirm = 2\nconfirm_time = "1s"\n'  # CHEAP_CONFIRM (tests/conftest.py)
        "instance_counts = [1, 2]\n"
        '[output]\ndir = "out"\nstore = false\nreport = false\n'
    )
    rc = main(["run", str(path)])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert (tmp_path / "out" / "models" / "sleeper" / "config.pbtxt").is_file()
    assert (repo / "sleeper" / "config.pbtxt").read_bytes() == original
    assert not list((repo / "sleeper").glob("config.pbtxt.*"))  # no temp or backup files left behind
    # Run again: a new study in a new folder, the first run's results kept (not an error asking for --resume).
    rc = main(["run", str(path)])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert (tmp_path / "out" / "tune-sleeper" / "study.db").is_file()
    assert (tmp_path / "out" / "tune-sleeper-2" / "study.db").is_file()

"""`perfkit gate` end to end over record files: exit codes, every output, clear errors."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from perfkit.cli import main
from perfkit.gate.synthetic import MACHINE, synthetic_level, synthetic_record
from perfkit.store import open_store

WIN = {"windows": 8, "window_s": 1.5, "noise": 0.03}


@pytest.fixture
def runs(tmp_path: Path) -> dict[str, Path]:
    return {
        "base": synthetic_record(seed=1, **WIN).save(tmp_path / "base.json"),
        "same": synthetic_record(seed=2, **WIN).save(tmp_path / "same.json"),
        "slow": synthetic_record(seed=3, offset=2.0, **WIN).save(tmp_path / "slow.json"),
        "fast": synthetic_record(seed=4, offset=0.5, **WIN).save(tmp_path / "fast.json"),
        "noisy_free_15": synthetic_record(seed=7, offset=1.15, **WIN).save(tmp_path / "noisy_free_15.json"),
        "short": synthetic_record(seed=5, windows=3, window_s=0.2).save(tmp_path / "short.json"),
        "noisy": synthetic_record(seed=6, windows=2, window_s=6.0, noise=0.3, offset=1.15).save(
            tmp_path / "noisy.json"
        ),
        "other_model": synthetic_record(model="batcher", **WIN).save(tmp_path / "other_model.json"),
        "other_load": synthetic_record([synthetic_level(concurrency=2, **WIN)]).save(tmp_path / "other_load.json"),
        "other_machine": synthetic_record(seed=2, machine=dataclasses.replace(MACHINE, gpus=("H100",)), **WIN).save(
            tmp_path / "other_machine.json"
        ),
    }


def _gate(runs: dict[str, Path], base: str, cur: str, *extra: str) -> int:
    return main(["gate", "--baseline", str(runs[base]), "--current", str(runs[cur]), *extra])


@pytest.fixture(autouse=True)
def _no_step_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


@pytest.mark.parametrize(
    ("cur", "code", "word"),
    [("same", 0, "PASS"), ("fast", 0, "IMPROVEMENT"), ("slow", 10, "REGRESSION"), ("short", 12, "INVALID")],
)
def test_exit_codes(runs, capsys, cur, code, word):
    assert _gate(runs, "base", cur) == code
    captured = capsys.readouterr()
    assert word in captured.out
    assert f"exit {code}" in captured.err and (code == 0 or word in captured.err)


def test_inconclusive_exit_11_says_how_much_more(runs, capsys, tmp_path):
    noisy_base = synthetic_record(seed=7, windows=2, window_s=6.0, noise=0.3).save(tmp_path / "nb.json")
    runs["noisy_base"] = noisy_base
    assert _gate(runs, "noisy_base", "noisy", "--threshold", "throughput:-5%") == 11
    assert "more windows" in capsys.readouterr().out


def test_all_findings_printed_before_exit(runs, capsys):
    assert _gate(runs, "base", "slow") == 10
    out = capsys.readouterr().out
    for level in ("concurrency 1", "concurrency 4"):
        for metric in ("throughput", "p99 (service)"):
            assert any(level in line and metric in line for line in out.splitlines()), (level, metric)
    assert "stored baseline" in out and "weaker" in out


def test_junit_carries_the_failure(runs, tmp_path):
    junit = tmp_path / "gate.xml"
    assert _gate(runs, "base", "slow", "--junit", str(junit)) == 10
    root = ET.parse(junit).getroot()
    cases = root.findall(".//testcase")
    assert len(cases) == 4  # 2 levels x 2 metrics
    failed = [c for c in cases if c.find("failure") is not None]
    assert failed and all(c.find("failure").get("type") == "regression" for c in failed)  # type: ignore[union-attr]  # a failed test case always has a failure element
    assert any("p99" in c.get("name", "") for c in failed)
    assert root.get("failures") == str(len(failed))
    junit_ok = tmp_path / "ok.xml"
    assert _gate(runs, "base", "same", "--junit", str(junit_ok)) == 0
    assert not ET.parse(junit_ok).getroot().findall(".//failure")


def test_step_summary_markdown_appended(runs, tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    summary.write_text("# earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert _gate(runs, "base", "slow") == 10
    text = summary.read_text()
    assert text.startswith("# earlier step\n")
    assert "## ❌ perfkit gate: regression" in text
    assert "| level | metric | baseline | current | change |" in text
    assert "| concurrency 4 | p99 (service) |" in text


def test_json_output(runs, tmp_path):
    out = tmp_path / "gate.json"
    assert _gate(runs, "base", "slow", "--json", str(out)) == 10
    doc = json.loads(out.read_text())
    assert doc["verdict"] == "regression" and doc["exit_code"] == 10
    finding = doc["results"][0]["findings"][0]
    assert {"metric", "baseline", "current", "delta_pct", "verdict", "confidence", "ci_pct"} <= set(finding)


def test_custom_thresholds(runs):  # slow: latency x2, throughput /2
    assert _gate(runs, "base", "slow", "--threshold", "throughput:-60%") == 0
    assert _gate(runs, "base", "slow", "--threshold", "throughput:-40%") == 10


def test_job_noise_option(runs, capsys):
    # +15% with nothing but window noise: within two jobs' default noise on a stored baseline,
    # a regression once the user says their runners are quiet
    p99 = ("--threshold", "p99:+10%")
    assert _gate(runs, "base", "noisy_free_15", *p99) == 0
    out = capsys.readouterr().out
    assert "within the noise between two jobs" in out and "job-to-job noise allowed" in out
    assert _gate(runs, "base", "noisy_free_15", *p99, "--job-noise", "all:0%") == 10
    assert _gate(runs, "base", "noisy_free_15", *p99, "--job-noise", "p99:2%") == 10
    assert _gate(runs, "base", "same", "--job-noise", "p99") == 2
    assert "--job-noise 'p99' is not METRIC:PERCENT%" in capsys.readouterr().err
    assert _gate(runs, "base", "same", "--job-noise", "p98:5%") == 2


def test_refusals_and_allowances(runs, capsys):
    assert _gate(runs, "base", "other_load") == 12
    assert "refusing to compare: the load differs" in capsys.readouterr().err
    assert _gate(runs, "base", "other_machine") == 12
    assert "--allow-different-machine" in capsys.readouterr().err
    assert _gate(runs, "base", "other_machine", "--allow-different-machine") == 0


def test_bad_baselines_are_clear_errors(runs, tmp_path, capsys):
    assert main(["gate", "--baseline", str(tmp_path / "missing.json"), "--current", str(runs["same"])]) == 3
    assert "missing.json does not exist" in capsys.readouterr().err
    old = json.loads(runs["base"].read_text()) | {"schema_version": 99}
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert main(["gate", "--baseline", str(tmp_path / "old.json"), "--current", str(runs["same"])]) == 3
    assert "schema_version 99" in capsys.readouterr().err
    assert _gate(runs, "other_model", "same") == 3
    assert "model 'batcher'" in capsys.readouterr().err
    assert (
        main(
            ["gate", "--baseline", "nosuchname", "--current", str(runs["same"]), "--store", str(tmp_path / "x.sqlite")]
        )
        == 3
    )
    assert main(["gate", "--current", str(runs["same"])]) == 2
    assert main(["gate", "--baseline", str(runs["base"]), "--current", str(runs["same"]), "--threshold", "p99"]) == 2


def test_baseline_by_store_name_and_by_directory(runs, tmp_path, monkeypatch):
    store = tmp_path / "results.sqlite"
    assert main(["baseline", "save", str(runs["base"]), "--name", "main", "--store", str(store)]) == 0
    assert main(["gate", "--baseline", "main", "--store", str(store), "--current", str(runs["slow"])]) == 10
    monkeypatch.setenv("PERFKIT_STORE", str(store))
    assert main(["gate", "--baseline", "main", "--current", str(runs["same"])]) == 0
    with open_store(str(tmp_path / "dir") + "/") as st:
        st.save(synthetic_record(seed=1, **WIN), "sleeper", commit="")
        st.save(synthetic_record(model="batcher", **WIN), "batcher", commit="")
    assert main(["gate", "--baseline", str(tmp_path / "dir"), "--current", str(runs["slow"])]) == 10

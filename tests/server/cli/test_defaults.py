"""Defaults defined once (on ProfileSpec) and consistent end to end: profile, profile, gate passes."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from perfkit.cli import main
from perfkit.cli import profile as profile_cli
from perfkit.errors import ExitCode
from perfkit.gate import DEFAULT_THRESHOLDS, GateOptions, parse_thresholds
from perfkit.records import DEFAULT_TAIL_PERCENTILES, LoadLevel, ProfileSpec, RunRecord

API_PAGE = Path(__file__).resolve().parents[3] / "docs" / "reference" / "python-api.md"


def _cli_spec(monkeypatch: pytest.MonkeyPatch, *args: str) -> ProfileSpec:
    seen: dict[str, Any] = {}
    monkeypatch.setattr(profile_cli, "run_profile", lambda opts, spec, *a, **k: seen.setdefault("spec", spec))
    assert main(["profile", *args, "-u", "localhost:1"]) == ExitCode.OK
    return seen["spec"]


def _readme_api_spec() -> ProfileSpec:
    text = API_PAGE.read_text(encoding="utf-8")
    block = re.search(r"# Python API.*?```python\n(.*?)```", text, flags=re.S)
    assert block, "the Python API page has no example"
    call = re.search(r"ProfileSpec\((.*?)\)\)", block.group(1))
    assert call, "the Python API page's example builds no ProfileSpec"
    return eval(f"ProfileSpec({call.group(1)}))", {"ProfileSpec": ProfileSpec, "LoadLevel": LoadLevel})  # noqa: S307


def _measuring_fields(spec: ProfileSpec) -> dict[str, Any]:
    return {k: v for k, v in dataclasses.asdict(spec).items() if k not in ("model", "levels")}


def test_readme_api_example_and_cli_measure_with_the_same_defaults(monkeypatch):
    api = _readme_api_spec()
    cli = _cli_spec(monkeypatch, "-m", api.model, "--concurrency-range", "4")
    assert cli.levels == api.levels
    assert _measuring_fields(cli) == _measuring_fields(api)


def test_tail_percentiles_default_to_what_the_gate_judges_by_default():
    judged = {t.metric for t in parse_thresholds(list(DEFAULT_THRESHOLDS))} - {"throughput"}
    assert {f"p{p:g}".replace(".", "") for p in DEFAULT_TAIL_PERCENTILES} == judged
    assert GateOptions().thresholds == tuple(parse_thresholds([]))
    assert GateOptions().min_windows == ProfileSpec(model="m", levels=()).min_windows


def test_sweep_files_read_the_same_defaults(tmp_path):
    from perfkit.campaign.sweep import load_sweep

    (tmp_path / "models").mkdir()
    path = tmp_path / "sweep.toml"
    path.write_text('[server]\nmodel_repository = "models"\n[[models]]\nname = "identity"\n[load]\nlevels = [4]\n')
    (plan,) = load_sweep(path).models
    assert _measuring_fields(plan.spec) == _measuring_fields(ProfileSpec(model="identity", levels=()))


@pytest.mark.quiet
def test_profile_twice_then_gate_passes_on_an_unchanged_model(triton, tmp_path, capsys):
    url = triton.endpoints.http_url
    runs = []
    for name in ("a", "b"):
        out = tmp_path / f"{name}.json"
        # sleeper: latency set by the model (10 ms), as on a GPU; a sub-ms model's p99 on a shared
        # VM moves by tens of percent between runs, which a gate rightly calls inconclusive
        assert main(["profile", "-m", "sleeper", "-u", url, "--concurrency-range", "1:2", "-o", str(out)]) == 0
        runs.append(out)
    for path in runs:  # every level holds the evidence the default gate asks for
        for level in RunRecord.load(path).levels:
            assert "p99" not in level.latency().thin, level
    report = tmp_path / "gate.json"
    rc = main(["gate", "--baseline", str(runs[0]), "--current", str(runs[1]), "--json", str(report)])
    findings = [f for r in json.loads(report.read_text())["results"] for f in r["findings"]]
    assert {f["verdict"] for f in findings} <= {"pass", "improvement"}, capsys.readouterr().out
    assert rc == ExitCode.OK

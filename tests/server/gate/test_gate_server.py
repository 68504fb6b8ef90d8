"""The gate against a real Triton server: no flake on the same config, a planted regression caught,
an improvement reported, A/B mode restoring the user's config byte for byte."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from perfkit import measure
from perfkit.cli import main
from perfkit.gate import GateOptions, compare_records, parse_thresholds
from perfkit.records import LoadLevel, ProfileSpec, RunRecord
from perfkit.server import LocalLaunch, launch_local
from perfkit.server.local import LocalServer
from tests.conftest import copy_models

pytestmark = [pytest.mark.slow]

SPEC = ProfileSpec(
    model="sleeper",
    levels=(LoadLevel("concurrency", 1), LoadLevel("concurrency", 4)),
    measurement_interval_ms=400,
    min_windows=4,
    max_trials=5,
    stability_percentage=15,
    warmup_s=0.3,
)
# p50 and p90 only: a 2-second level at concurrency 1 has ~180 samples, too few to certify a p99.
THRESHOLDS = ("throughput:-15%", "p50:+15%", "p90:+25%")
OPTS = GateOptions(thresholds=tuple(parse_thresholds(list(THRESHOLDS))))


def _config(delay_ms: int, original: str) -> str:
    assert 'string_value: "10"' in original
    return original.replace('string_value: "10"', f'string_value: "{delay_ms}"')


@pytest.fixture(scope="module")
def sleeper_server(tritonserver: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalServer, Path]]:
    repo = copy_models(tmp_path_factory.mktemp("gate"), ["sleeper"])
    with launch_local(LocalLaunch(repo, models=("sleeper",))) as server:
        yield server, repo


def _profile_with(server: LocalServer, repo: Path, delay_ms: int) -> RunRecord:
    cfg = repo / "sleeper" / "config.pbtxt"
    original = cfg.read_text()
    try:
        cfg.write_text(_config(delay_ms, original))
        server.load_model("sleeper")
        return measure.profile(server, SPEC)
    finally:
        cfg.write_text(original)
        server.load_model("sleeper")


@pytest.fixture(scope="module")
def baseline(sleeper_server: tuple[LocalServer, Path]) -> RunRecord:
    server, _ = sleeper_server
    return measure.profile(server, SPEC)


@pytest.mark.quiet
def test_same_config_passes_five_times_in_a_row(sleeper_server, baseline):
    server, _ = sleeper_server
    verdicts = []
    for _ in range(5):
        result = compare_records(baseline, measure.profile(server, SPEC), OPTS)
        verdicts.append(result.verdict)
        assert result.verdict in ("pass", "improvement"), [(f.level, f.metric, f.reason) for f in result.findings]
    assert len(verdicts) == 5


def test_planted_regression_fails_names_the_metric_and_junit_carries_it(sleeper_server, baseline, tmp_path, capsys):
    server, repo = sleeper_server
    slower = _profile_with(server, repo, 13)  # 30% slower per execution
    base_path, cur_path = baseline.save(tmp_path / "base.json"), slower.save(tmp_path / "cur.json")
    junit = tmp_path / "gate.xml"
    thresholds = [arg for t in THRESHOLDS for arg in ("--threshold", t)]
    rc = main(["gate", "--baseline", str(base_path), "--current", str(cur_path), "--junit", str(junit), *thresholds])
    out = capsys.readouterr().out
    assert rc == 10, out
    assert "REGRESSION" in out and "concurrency 1  throughput" in out
    failures = [c for c in ET.parse(junit).getroot().iter("testcase") if c.find("failure") is not None]
    assert any("throughput" in c.get("name", "") for c in failures)
    assert any("p50" in c.get("name", "") for c in failures)


def test_improvement_is_reported_and_passes(sleeper_server, baseline):
    server, repo = sleeper_server
    faster = _profile_with(server, repo, 7)
    result = compare_records(baseline, faster, OPTS)
    assert result.exit_code == 0
    assert "improvement" in {f.verdict for f in result.findings}
    assert "regression" not in {f.verdict for f in result.findings}


@pytest.mark.quiet
@pytest.mark.usefixtures("tritonserver")
def test_ab_mode_catches_the_regression_and_restores_the_config(tmp_path, capsys):
    repo = copy_models(tmp_path, ["sleeper"])
    cfg = repo / "sleeper" / "config.pbtxt"
    cfg.write_bytes(cfg.read_bytes() + b"\n# the user's own comment, kept byte for byte\n")
    original = cfg.read_bytes()
    (tmp_path / "candidate.pbtxt").write_text(_config(13, original.decode()))
    rc = main(
        [
            "gate", "--ab", "-m", "sleeper", "--model-repository", str(repo),
            "--baseline-config", str(cfg), "--candidate-config", str(tmp_path / "candidate.pbtxt"),
            "--rounds", "2", "--concurrency", "2", "--measurement-interval", "300",
            "--max-trials", "4", "--min-windows", "3", *[a for t in THRESHOLDS for a in ("--threshold", t)],
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 10, out
    assert "A/B interleaved" in out
    assert cfg.read_bytes() == original


@pytest.mark.usefixtures("tritonserver")
def test_ab_mode_restores_the_config_when_the_candidate_fails_to_load(tmp_path, capsys):
    repo = copy_models(tmp_path, ["sleeper"])
    cfg = repo / "sleeper" / "config.pbtxt"
    original = cfg.read_bytes()
    (tmp_path / "broken.pbtxt").write_text('name: "sleeper"\nbackend: "python"\nmax_batch_size: -3\n')
    rc = main(
        [
            "gate", "--ab", "-m", "sleeper", "--model-repository", str(repo), "--baseline-config", str(cfg),
            "--candidate-config", str(tmp_path / "broken.pbtxt"), "--rounds", "1", "--measurement-interval", "300",
        ]
    )  # fmt: skip
    assert rc == 4, capsys.readouterr().err
    assert cfg.read_bytes() == original


def test_ab_mode_refuses_a_candidate_the_server_did_not_apply(sleeper_server, tmp_path, capsys):
    # The server reads its own repository; --model-repository names another copy. Writing there
    # and reloading leaves the server on its own config: the candidate is not what would be measured.
    server, served_repo = sleeper_server
    served_cfg = served_repo / "sleeper" / "config.pbtxt"
    served_before = served_cfg.read_bytes()
    other = copy_models(tmp_path, ["sleeper"])
    cfg = other / "sleeper" / "config.pbtxt"
    original = cfg.read_bytes()
    (tmp_path / "candidate.pbtxt").write_text(_config(13, original.decode()))
    rc = main(
        [
            "gate", "--ab", "-m", "sleeper", "-u", server.endpoints.http_url, "--model-repository", str(other),
            "--baseline-config", str(cfg), "--candidate-config", str(tmp_path / "candidate.pbtxt"),
            "--rounds", "1", "--concurrency", "1", "--measurement-interval", "300", "--max-trials", "3",
        ]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 4, err
    assert "did not apply the candidate config of 'sleeper'" in err and "delay_ms" in err
    assert cfg.read_bytes() == original and served_cfg.read_bytes() == served_before
    # The server still serves its own, unchanged config.
    applied = server.model_config("sleeper")
    assert applied["parameters"]["delay_ms"]["string_value"] == "10"

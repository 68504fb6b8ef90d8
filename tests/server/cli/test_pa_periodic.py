"""perf_analyzer's --periodic-concurrency-range through perfkit's `perf_analyzer` command.

tests/pa_compat/periodic_cases.json holds each command line with what the real perf_analyzer
(tritonclient 2.41.0) did against the `streamer` fixture model and what perfkit did
(tests/pa_compat/record_periodic.py). Held here: the refusals (one line, exit 99, perf_analyzer's
words) without a server; the runs against the streamer on the bundled Triton, their export
against perf_analyzer's, and the ramp rule on the export's per-request timestamps.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from perfkit.cli.pa import main as pa_main
from perfkit.server import LocalLaunch, launch_local
from perfkit.server.local import LocalServer
from tests.pa_compat.record_periodic import case_argv, export_facts
from tests.pa_compat.record_qa import adjacent_free_ports

HERE = Path(__file__).resolve().parents[2] / "pa_compat"
ROOT = HERE.parent.parent
CASES = {c["id"]: c for c in json.loads((HERE / "periodic_cases.json").read_text())["cases"]}
REFUSED = [i for i, c in CASES.items() if c["perf_analyzer"]["returncode"] == 99]
RUNS = [i for i, c in CASES.items() if c["perf_analyzer"]["outcome"] == "ok"]


def _pa(argv: list[str], cwd: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.chdir(cwd)
    monkeypatch.delenv("PERFKIT_EXIT_CODES", raising=False)
    return pa_main(argv)


def test_recorded_outcomes_agree() -> None:
    """perfkit's recorded outcome is perf_analyzer's for every case (0 as 0; any failure as a failure)."""
    for case_id, c in CASES.items():
        pa, pk = c["perf_analyzer"], c["perfkit"]
        assert (pa["returncode"] == 0) == (pk["returncode"] == 0), case_id
        if pa["returncode"] == 99:
            assert pk["returncode"] == 99 and pa["message"].removeprefix("Error: ") in pk["message"] + ".", case_id


@pytest.mark.parametrize("case_id", REFUSED)
def test_refused_like_perf_analyzer(
    case_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Checked before any server is reached: one line in perf_analyzer's words, exit 99."""
    argv = case_argv(CASES[case_id], "127.0.0.1:1", tmp_path / "export.json")
    assert _pa(argv, tmp_path, monkeypatch) == 99
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("perfkit: error:")]
    assert len(err) == 1
    assert CASES[case_id]["perf_analyzer"]["message"].removeprefix("Error: ").rstrip(".") in err[0]


@pytest.fixture(scope="module")
def streamer(tritonserver: Path) -> Iterator[LocalServer]:
    port = adjacent_free_ports()  # gRPC next to HTTP, as Triton's 8000/8001 (-i grpc finds HTTP at port - 1)
    launch = LocalLaunch(ROOT / "fixtures" / "models", models=("streamer",), http_port=port, grpc_port=port + 1)
    with launch_local(launch) as server:
        yield server


@pytest.mark.parametrize("case_id", RUNS)
def test_periodic_run_like_perf_analyzer(
    case_id: str, streamer: LocalServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = CASES[case_id]
    export = tmp_path / "export.json"
    rc = _pa(case_argv(case, streamer.endpoints.grpc_url or "", export), tmp_path, monkeypatch)
    assert rc == 0
    got, want = export_facts(export), case["perf_analyzer"]["export_facts"]
    for key in ("experiment", "window_boundaries", "requests"):
        assert got[key] == want[key], (key, got, want)
    # perf_analyzer also times the flag-only final response (src/infer_context.cc:319); perfkit does not
    assert got["responses_per_request"] == [n - 1 for n in want["responses_per_request"]]


def test_concurrency_ramps_by_response_count(
    streamer: LocalServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2:6:2 every 4 responses, requests of 40 responses (none ends before the ramp is done): 2, then 4,
    then 6 in flight, each step leaving after the previous step's requests had their 4th response."""
    export = tmp_path / "export.json"
    argv = ["-u", streamer.endpoints.grpc_url or "", "-m", "streamer", "-i", "grpc", "--streaming"]
    argv += ["--input-data", str(HERE / "files" / "streamer_40_tokens.json"), "--profile-export-file", str(export)]
    assert _pa([*argv, "--periodic-concurrency-range", "2:6:2", "--request-period", "4"], tmp_path, monkeypatch) == 0
    reqs = sorted(json.loads(export.read_text())["experiments"][0]["requests"], key=lambda r: r["timestamp"])
    assert len(reqs) == 6
    groups = [reqs[:2], reqs[2:4], reqs[4:6]]
    for before, after in zip(groups, groups[1:]):
        reached = max(r["response_timestamps"][3] for r in before)
        assert all(r["timestamp"] >= reached for r in after), "a step began before the previous one's period"
    in_flight = [sum(q["timestamp"] <= r["timestamp"] < q["response_timestamps"][-1] for q in reqs) for r in reqs]
    assert in_flight == [1, 2, 3, 4, 5, 6]


def test_period_past_the_final_response_fails(
    streamer: LocalServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """perf_analyzer aborts (SIGABRT) when a request ends before its period; perfkit says so, exit 99."""
    case = CASES["period-past-final"]
    assert case["perf_analyzer"]["returncode"] != 0
    rc = _pa(case_argv(case, streamer.endpoints.grpc_url or "", tmp_path / "e.json"), tmp_path, monkeypatch)
    assert rc == 99
    assert "final response before request period was reached" in capsys.readouterr().err

"""Triton's QA command lines for perf_analyzer, run through perfkit's `perf_analyzer` command.

tests/pa_compat/qa_cases.json holds every command line of qa/L0_perf_analyzer*/test.sh (expanded
over their loops) with the outcome the real perf_analyzer gave here and the one perfkit gave
(tests/pa_compat/record_qa.py). Here:
- every command line is read (no "No such option"): each parses, or is refused with the reason
  perfkit's flag table gives, or is one the QA script itself expects to fail;
- a representative set runs end to end against the stand-in models, each held to perf_analyzer's
  outcome (or to perfkit's where `perfkit_differs` says why), with short windows (-p) to keep CI
  fast: the command lines are otherwise unchanged;
- a run that measured nothing exits non-zero, also for sequence and decoupled models.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from perfkit.cli._pa_compat import normalize_argv
from perfkit.cli._pa_flags import PA_FLAGS
from perfkit.cli.profile import command as profile_command
from perfkit.errors import ExitCode, PortInUseError, UsageError
from perfkit.server import LocalLaunch, launch_local
from perfkit.server.local import LocalServer
from tests.pa_compat.record_qa import adjacent_free_ports, case_argv, write_testdata

HERE = Path(__file__).resolve().parents[2] / "pa_compat"
CASES = json.loads((HERE / "qa_cases.json").read_text())["cases"]
BY_ID = {c["id"]: c for c in CASES}
_REASONS = {f.note for f in PA_FLAGS} | {r for f in PA_FLAGS for _, r in f.refused_values}

# run end to end in CI: the defects the QA suite found, and one of each flag family
E2E = (
    "L0_perf_analyzer:171",  # sequence model behind an ensemble, --input-data repeated, -t5, --streaming
    "L0_perf_analyzer:584-http",  # the same over HTTP, --sync
    "L0_perf_analyzer:744",  # sequence validation_data through the ensemble
    "L0_perf_analyzer:731",  # ... a wrong expected output fails
    "L0_perf_analyzer:278-http-system",  # -b 64 --shared-memory system on an image model
    "L0_perf_analyzer:462-grpc-system",  # --input-data DIR (one file per input)
    "L0_perf_analyzer:479-http-none",  # --input-data FILE twice
    "L0_perf_analyzer:444-grpc-none",  # --string-data
    "L0_perf_analyzer:321-http-graphdef_int32_int32_int32-10",  # -b past max_batch_size fails
    "L0_perf_analyzer:321-grpc-graphdef_nobatch_int32_int32_int32-0",  # -b 0 fails
    "L0_perf_analyzer:795",  # --measurement-mode count_windows, --string-data, --shape
    "L0_perf_analyzer:825",  # optional inputs across a -b 2 batch fail
    "L0_perf_analyzer:694",  # wrong validation_data fails
    "L0_perf_analyzer:897",  # decoupled model, --profile-export-file
    "L0_perf_analyzer_capi:112",  # the C API service kind (refused)
)
FAST = ["-p", "300"]  # shorter windows than the QA's 1-10 s: the outcome, not the figures, is under test


def measured(outcome: dict[str, object]) -> bool:
    """Whether a run measured: exit 0, or 2 (perf_analyzer's "did not stabilise", which depends on the
    machine's load, not on the command line)."""
    return outcome.get("returncode") in (0, 2)


def expected(case: dict[str, object]) -> bool:
    """Whether perfkit must measure: as perf_analyzer did, or as `perfkit_differs` says and why."""
    differs = case.get("perfkit_differs")
    if isinstance(differs, dict):
        return bool(differs["measured"])
    return measured(case["perf_analyzer"])  # type: ignore[arg-type]  # a recorded outcome is a JSON dict (typed object)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_every_qa_command_line_is_read(case: dict[str, object]) -> None:
    """No QA command line stops at an unknown flag: it parses, or a flag is refused with the table's reason."""
    argv = [str(a).format(inputdata="i", pa_compat="p", testdata="t", models="m", work="w", tritonserver_dir="s")
            for a in case["argv"]]  # type: ignore[attr-defined]  # fmt: skip
    try:
        norm, _ = normalize_argv(argv)
    except UsageError as err:
        assert any(reason in str(err) for reason in _REASONS), str(err)
        return
    try:
        profile_command.make_context("profile", norm, resilient_parsing=False)
    except click.UsageError as err:
        # only command lines the QA script itself expects to fail may be bad usage
        assert case["qa_expects"] == "error", f"{case['id']}: {err.format_message()}"
    except UsageError as err:
        # a value perf_analyzer 2.60 refuses as it parses (perfkit/cli/_flag_checks.py): 2.60 refused it too
        assert not measured(case["perf_analyzer_2.60"]), f"{case['id']}: {err}"  # type: ignore[arg-type]  # a recorded outcome is a JSON dict (typed object)


def test_recorded_outcomes_are_complete() -> None:
    """Every case that can run here has both tools' outcomes; the tally of how they ended."""
    runnable = [c for c in CASES if not c.get("skip")]
    missing = [c["id"] for c in runnable if "perf_analyzer" not in c or "perfkit" not in c]
    assert not missing, f"run tests/pa_compat/record_qa.py for: {missing[:5]}"
    for c in runnable:
        if measured(c["perfkit"]) != measured(c["perf_analyzer"]):
            assert "perfkit_differs" in c, f"{c['id']}: perfkit and perf_analyzer disagree with no reason recorded"
            assert c["perfkit_differs"]["measured"] == measured(c["perfkit"])
            assert c["perfkit_differs"]["reason"]


# Where perf_analyzer 2.60.0 (recorded here as `perf_analyzer_2.60`) and perfkit end differently, and why.
DIFFERS_FROM_260 = {
    **{
        f"L0_perf_analyzer:{line}-{proto}-{shm}": "2.60 refuses a file in an --input-data directory that names no"
        " input (the QA's test data holds custom.schedule beside INPUT0/INPUT1); perfkit ignores it, as 2.41 did and"
        " the QA script expects"
        for line in (462, 497)
        for proto in ("grpc", "http")
        for shm in ("none", "system")
    },
    "L0_perf_analyzer:383-http": "2.60's async HTTP open loop above what the server answered never ended (one TCP"
    " connection per outstanding request, a level waits for every one: benchmarks/pa_level_end.py)",
}


def test_outcomes_against_perf_analyzer_260_differ_only_where_explained() -> None:
    """perf_analyzer 2.60.0's recorded outcomes: perfkit ends the same way but for the cases explained above."""
    recorded = [c for c in CASES if "perf_analyzer_2.60" in c]
    assert len(recorded) == len([c for c in CASES if not c.get("skip")])
    differ = {c["id"] for c in recorded if measured(c["perf_analyzer_2.60"]) != measured(c["perfkit"])}
    assert differ == set(DIFFERS_FROM_260)


@pytest.fixture(scope="module")
def qa_server(
    tritonserver: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LocalServer, dict[str, str]]]:
    """The stand-in models on a server with adjacent HTTP/gRPC ports (as Triton's 8000/8001)."""
    tmp = tmp_path_factory.mktemp("pa_compat")
    repo = tmp / "models"
    shutil.copytree(HERE / "models", repo, ignore=shutil.ignore_patterns("__pycache__"))
    places = {
        "inputdata": str(HERE.parent / "inputdata" / "files"),
        "pa_compat": str(HERE / "files"),
        "testdata": str(write_testdata(tmp / "test_data")),
        "models": str(repo),
        "work": str(tmp),
        "tritonserver_dir": str(tmp / "none"),
    }
    server = None
    for _ in range(5):  # adjacent ports picked free can be taken by another process before tritonserver binds them
        port = adjacent_free_ports()
        try:
            server = launch_local(LocalLaunch(repo, http_port=port, grpc_port=port + 1))
            break
        except PortInUseError:
            continue
    assert server is not None, "no pair of adjacent ports stayed free in 5 tries"
    with server:
        yield server, places


def _run_pa(argv: list[str], cwd: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    from perfkit.cli.pa import main

    monkeypatch.chdir(cwd)
    monkeypatch.delenv("PERFKIT_EXIT_CODES", raising=False)
    return main(argv)


@pytest.mark.parametrize("case_id", E2E)
def test_qa_command_line_end_to_end(
    case_id: str,
    qa_server: tuple[LocalServer, dict[str, str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server, places = qa_server
    case = BY_ID[case_id]
    argv = case_argv(case, places, server.endpoints.http_url, server.endpoints.grpc_url or "")
    rc = _run_pa([*argv, *FAST], tmp_path, monkeypatch)
    assert measured({"returncode": rc}) == expected(case), f"{case_id}: exit {rc}"
    assert rc in (0, 2, 99), "the perf_analyzer command exits with perf_analyzer's codes"
    if "--profile-export-file" in argv and rc in (0, 2):
        # what the QA script checks of it: perf_analyzer's layout, several responses per request of a decoupled model
        doc = json.loads((tmp_path / argv[argv.index("--profile-export-file") + 1]).read_text())
        assert doc["version"] and doc["experiments"]
        exp = doc["experiments"][0]
        assert exp["experiment"]["mode"] == "concurrency" and exp["window_boundaries"]
        assert any(len(r["response_timestamps"]) > 1 for r in exp["requests"])
        assert all(r["response_timestamps"][0] >= r["timestamp"] for r in exp["requests"])


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        # a sequence model (behind an ensemble) whose every request fails
        (["-i", "grpc", "-m", "simple_savedmodel_sequence_object", "--streaming", "--string-data", "x"], "failed"),
        (["-i", "http", "-m", "savedmodel_sequence_object", "--string-data", "x"], "failed"),
        # a decoupled model whose every request fails
        (["-i", "grpc", "-m", "repeat_int32", "--streaming", "--input-data", "{pa_compat}/repeat_fail.json"], "failed"),
    ],
    ids=["sequence-ensemble-grpc", "sequence-http", "decoupled"],
)
def test_measured_nothing_never_exits_0(
    argv: list[str],
    says: str,
    qa_server: tuple[LocalServer, dict[str, str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from perfkit.cli import main

    server, places = qa_server
    argv = [a.format(**places) for a in argv]
    grpc = "grpc" in argv
    url = (server.endpoints.grpc_url if grpc else server.endpoints.http_url) or ""
    monkeypatch.chdir(tmp_path)
    rc = main(["profile", "-u", url, *argv, "-p", "300", "-r", "4"])
    err = capsys.readouterr().err
    assert rc == ExitCode.MEASUREMENT, err
    line = next(ln for ln in err.splitlines() if ln.startswith("perfkit: error:"))
    assert "measured nothing" in line and says in line
    monkeypatch.setenv("PERFKIT_EXIT_CODES", "perf_analyzer")
    assert main(["profile", "-u", url, *argv, "-p", "300", "-r", "3"]) == 99


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_grpc_compression_reaches_the_server(
    algorithm: str, qa_server: tuple[LocalServer, dict[str, str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compressed messages (flag set, grpc-encoding header) are decompressed and answered by Triton."""
    from perfkit.cli import main
    from perfkit.loadgen._h2 import grpc_message
    from perfkit.records import RunRecord

    assert grpc_message(b"x" * 100, algorithm)[0] == 1 and len(grpc_message(b"x" * 100, algorithm)) < 100
    server, _ = qa_server
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run.json"
    argv = ["-u", server.endpoints.grpc_url or "", "-i", "grpc", "-m", "graphdef_int32_int32_int32"]
    rc = main(["profile", *argv, "--grpc-compression-algorithm", algorithm.upper(), "-p", "300", "-o", str(out)])
    assert rc == 0
    (level,) = RunRecord.load(out).levels
    assert level.error_count == 0 and level.inference_count > 0
    assert RunRecord.load(out).spec.grpc_compression == algorithm


@pytest.mark.parametrize(("inputs", "outputs"), [("json", "json"), ("json", "binary"), ("binary", "json")])
def test_json_tensor_formats_over_http(
    inputs: str,
    outputs: str,
    qa_server: tuple[LocalServer, dict[str, str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Tensors as JSON both ways (BYTES included) are read and answered by Triton."""
    from perfkit.cli import main
    from perfkit.records import RunRecord

    server, _ = qa_server
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run.json"
    argv = ["-u", server.endpoints.http_url, "-m", "graphdef_object_object_object", "--string-data", "7"]
    fmt = ["--input-tensor-format", inputs.upper(), "--output-tensor-format", outputs]
    assert main(["profile", *argv, *fmt, "-p", "300", "-o", str(out)]) == 0
    (level,) = RunRecord.load(out).levels
    assert level.error_count == 0 and level.inference_count > 0


def test_bls_composing_models_join_the_server_breakdown(
    qa_server: tuple[LocalServer, dict[str, str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from perfkit.cli import main
    from perfkit.records import RunRecord

    server, _ = qa_server
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run.json"
    argv = ["-u", server.endpoints.http_url, "-m", "graphdef_int32_int32_int32", "--bls-composing-models=optional:1"]
    assert main(["profile", *argv, "-p", "300", "-o", str(out)]) == 0
    (level,) = RunRecord.load(out).levels
    assert level.server is not None
    assert [c.model for c in level.server.composing] == ["optional"]

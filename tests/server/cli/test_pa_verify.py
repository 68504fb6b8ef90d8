"""The `perf_analyzer` command refuses what perf_analyzer 2.60 refuses as it reads its command line.

Provenance: each refused command line below was run here with the real perf_analyzer 2.60.0 (the
`perf-analyzer` wheel, benchmarks/_anchor.py, "Perf Analyzer Version 0.0.0 (commit 3a49a23)") as
`perf_analyzer -m nomodel -u 127.0.0.1:1 ARGS`: every one exited 99 before connecting, printing its usage
and the `Error:` line quoted here. The conditions are CLParser::ParseCommandLine (per option) and
CLParser::VerifyOptions in triton-inference-server/perf_analyzer src/command_line_parser.cc. The values
are those the issue lists from the QA command lines that 2.60 refuses and perfkit used to accept.
The trace settings cases were run the same way against the bundled Triton (outcomes in the test).
"""

from __future__ import annotations

import json
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from perfkit.cli._pa_verify import verify_like_pa
from perfkit.cli.pa import main
from perfkit.errors import UsageError
from perfkit.server import LocalLaunch, launch_local
from perfkit.server.local import LocalServer

ROOT = Path(__file__).resolve().parents[3]

_PCT = "Failed to parse --percentile. The value must be -1 for not reporting or in range (0, 100)."
_TRACE_LEVEL = (
    "Failed to parse --trace-level. Unsupported type provided: 'foo'."
    " The available options are 'OFF', 'TIMESTAMPS', or 'TENSORS'."
)
REFUSED = [
    (["--percentile", "225"], _PCT),
    (["--percentile", "0"], _PCT),
    (["--percentile", "abc"], _PCT),
    (["-l", "-1"], "Failed to parse --latency-threshold (-l). The value must be >= 0 msecs."),
    (["-l", "abc"], "Failed to parse -l. Invalid value provided: abc"),
    (["-s", "-1"], "Failed to parse --stability-percentage (-s). The value must be >= 0.0."),
    (["-s", "abc"], "Failed to parse -s. Invalid value provided: abc"),
    (["-p", "-5"], "Failed to parse --measurement-interval (-p). The value must be > 0 msec."),
    (["-p", "0"], "Failed to parse --measurement-interval (-p). The value must be > 0 msec."),
    (["--measurement-interval", "-1"], "Failed to parse --measurement-interval (-p). The value must be > 0 msec."),
    (["--warmup-request-count", "-1"], "Failed to parse --warmup-request-count. The value must be >= 0."),
    (["--max-trials", "0"], "Failed to parse --max-trials (-r). The value must be > 0."),
    (["-r", "-1"], "Failed to parse --max-trials (-r). The value must be > 0."),
    (["--streaming"], "Streaming is only allowed with gRPC protocol and Triton C API."),
    (["--metrics-url", "x:1/metrics"], "Must specify --collect-metrics when using the --metrics-url option."),
    (["--metrics-interval", "100"], "Must specify --collect-metrics when using the --metrics-interval option."),
    (["--collect-metrics", "--metrics-interval", "0"],
     "Failed to parse --metrics-interval. The value must be > 0 msecs."),
    (["--request-parameter", "a:1:int"],
     "The --request-parameter option is currently only supported by gRPC protocol."),
    (["-i", "grpc", "--request-parameter", "a:1"],
     "Failed to parse --request-parameter. The value does not match <name:value:type>."),
    (["-i", "grpc", "--request-parameter", "a:1:2:int"],
     "Failed to parse --request-parameter. The value does not match <name:value:type>."),
    (["--request-parameter", "a:x:int"],  # VerifyOptions' protocol check comes before perfkit's read of the int
     "The --request-parameter option is currently only supported by gRPC protocol."),
    (["--trace-level", "foo"], _TRACE_LEVEL),
    (["--trace-count", "-2"], "Failed to parse --trace-count. The value must be >= 0 or set to -1 (default)."),
    (["--log-frequency", "-1"], "Failed to parse --log-frequency. The value must be >= 0."),
]  # fmt: skip


@pytest.mark.parametrize(("args", "says"), REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_refused_as_perf_analyzer_260_refuses(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exit 99 (perf_analyzer's code for a bad command line), one line in perf_analyzer's words, nothing sent:
    the unreachable URL would fail differently had it got that far."""
    monkeypatch.delenv("PERFKIT_EXIT_CODES", raising=False)
    assert main(["-m", "nomodel", "-u", "127.0.0.1:1", *args]) == 99
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"perfkit: error: {says}"]


@pytest.mark.parametrize(
    ("args", "read_as"),
    [
        # perf_analyzer reads --percentile with atoi: -1 means "none", a fraction is cut to its integer
        (["--percentile", "-1"], []),
        (["--percentile", "99.9"], ["--percentile", "99"]),
        (["--percentile=95"], ["--percentile", "95"]),
        # attached and clustered forms are read as getopt reads them; 0 is a valid -l (no limit), -s 0 too
        (["-vp2000", "-l", "0", "-s", "0"], ["-v", "-p", "2000", "-l", "0", "-s", "0"]),
        (["-i", "GRPC", "--streaming"], ["-i", "GRPC", "--streaming"]),
        (["--collect-metrics", "--metrics-interval", "50"], ["--collect-metrics", "--metrics-interval", "50"]),
        # --request-parameter as 2.60's gRPC client sends it (tritonclient grpc_client.cc): type lower-cased, int by
        # std::stoi, bool true only for "true", the last of a name wins, other types not sent
        (
            [
                "-i",
                "grpc",
                "--request-parameter",
                "a:07x:INT",
                "--request-parameter",
                "b:True:bool",
                "--request-parameter",
                "a: 8:int",
                "--request-parameter",
                "c:1:uint",
                "--request-parameter",
                "d:x y:String",
            ],
            [
                "-i",
                "grpc",
                "--request-parameter",
                "a:8:int",
                "--request-parameter",
                "b:false:bool",
                "--request-parameter",
                "d:x y:string",
            ],
        ),
    ],
)
def test_accepted_as_perf_analyzer_260_reads_them(args: list[str], read_as: list[str]) -> None:
    out, trace = verify_like_pa(args)
    assert out == read_as and trace is None


@pytest.mark.parametrize("value", ["a:x:int", f"a:{2**31}:int"])
def test_an_int_260_would_abort_on_is_refused_before_measuring(
    value: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """2.60 accepts these as it parses, then its gRPC client's std::stoi throws at the first request (the
    process aborts): refused here, exit 99, nothing sent (the unreachable URL would fail otherwise)."""
    monkeypatch.delenv("PERFKIT_EXIT_CODES", raising=False)
    assert main(["-m", "nomodel", "-u", "127.0.0.1:1", "-i", "grpc", "--request-parameter", value]) == 99
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"perfkit: error: --request-parameter {value}: ") and "std::stoi" in line


def test_trace_flags_become_one_settings_update_last_wins() -> None:
    out, trace = verify_like_pa(["-m", "m", "--trace-level", "TENSORS", "--trace-level", "OFF", "--trace-rate", "7"])
    assert out == ["-m", "m"]
    assert trace is not None and trace.body() == {"trace_level": ["OFF"], "trace_rate": "7"}
    with pytest.raises(UsageError):  # perf_analyzer compares the level's case exactly
        verify_like_pa(["--trace-level", "timestamps"])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    repo = tmp_path_factory.mktemp("trace") / "models"
    shutil.copytree(ROOT / "fixtures" / "models" / "identity", repo / "identity")
    with launch_local(LocalLaunch(repo)) as s:
        yield s


def _trace_settings(server: LocalServer) -> dict[str, object]:
    with urllib.request.urlopen(f"http://{server.endpoints.http_url}/v2/trace/setting", timeout=10) as resp:
        return dict(json.loads(resp.read()))


@pytest.mark.usefixtures("tritonserver")
def test_trace_options_set_the_servers_trace_settings(
    server: LocalServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """As perf_analyzer 2.60 did against this server: `--trace-rate 7 --trace-count 5 --log-frequency 3` left
    trace_rate "7", trace_count "5", log_frequency "3" set and measured; over gRPC the same, through Triton's
    gRPC trace API at -u (as 2.60's client backend does); `--trace-level TIMESTAMPS` on a server started without a
    trace file, and `--trace-rate abc`, exited 99 with the server's refusal ("trace file name is not given",
    "Unable to parse 'trace_rate', got: abc") and measured nothing."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PERFKIT_EXIT_CODES", raising=False)
    run = ["-m", "identity", "-p", "300", "-r", "3", "-s", "100", "-f", "out.csv"]
    trace = ["--trace-rate", "7", "--trace-count", "5", "--log-frequency", "3"]
    assert main(["-u", server.endpoints.http_url, *run, *trace]) in (0, 2)
    got = _trace_settings(server)
    assert (got["trace_rate"], got["trace_count"], got["log_frequency"]) == ("7", "5", "3")
    # the trace settings go through gRPC's trace API at -u; --admin-url is where perfkit reads model statistics
    grpc = ["-u", server.endpoints.grpc_url or "", "-i", "grpc", "--admin-url", server.endpoints.http_url]
    assert main([*grpc, *run, "--trace-rate", "9"]) in (0, 2)
    assert _trace_settings(server)["trace_rate"] == "9"
    capsys.readouterr()
    (tmp_path / "out.csv").unlink()
    for bad, says in (
        (["--trace-level", "TIMESTAMPS"], "trace file name is not given"),
        (["--trace-rate", "abc"], "abc"),
    ):
        assert main(["-u", server.endpoints.http_url, *run, *bad]) == 99
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "trace settings" in err[0] and says in err[0]
        assert not (tmp_path / "out.csv").exists()
    assert _trace_settings(server)["trace_rate"] == "9"  # a refused update changes nothing


# perf_analyzer 2.60.0's -f header, seen here (`-m identity -p 300 -r 3 -s 100 -f o.csv --percentile 95` against
# the identity fixture; 2.41.0 wrote the same); with --verbose-csv it adds "request/response,response wait"
# ("Avg latency" before them without --percentile): src/report_writer.cc, ReportWriter::GenerateReport.
PA_260_HEADER = (
    "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,"
    "Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency"
)


@pytest.mark.usefixtures("tritonserver")
@pytest.mark.parametrize(
    ("extra", "header"),
    [
        ([], PA_260_HEADER),
        (["--verbose-csv"], PA_260_HEADER + ",Avg latency,request/response,response wait"),
        (["--verbose-csv", "--percentile", "99"], PA_260_HEADER + ",request/response,response wait"),
    ],
)
def test_csv_header_is_perf_analyzer_260s(
    extra: list[str], header: str, server: LocalServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PERFKIT_EXIT_CODES", raising=False)
    assert main(["-u", server.endpoints.http_url, "-m", "identity", "-p", "300", "-r", "3", "-f", "o.csv", *extra]) in (
        0,
        2,
    )
    lines = (tmp_path / "o.csv").read_text().splitlines()
    assert lines[0] == header
    assert len(lines) == 2 and len(lines[1].split(",")) == len(header.split(","))


@pytest.mark.usefixtures("tritonserver")
def test_over_grpc_the_trace_settings_go_through_grpcs_trace_api(server: LocalServer) -> None:
    """-i grpc: the settings reach the server over gRPC alone (no HTTP address given), and a refusal comes
    back in the server's words, as 2.60's client backend (UpdateTraceSettings of its gRPC client)."""
    from perfkit.cli._pa_verify import PaTraceSettings
    from perfkit.cli.pa import apply_trace_settings
    from perfkit.errors import ServerError

    at = ["-u", server.endpoints.grpc_url or "", "-i", "grpc"]
    apply_trace_settings(PaTraceSettings((("trace_rate", "11"), ("log_frequency", "4"))), at)
    got = _trace_settings(server)
    assert (got["trace_rate"], got["log_frequency"]) == ("11", "4")
    with pytest.raises(ServerError, match="trace file name is not given"):
        apply_trace_settings(PaTraceSettings((("trace_level", "TIMESTAMPS"),)), at)
    assert _trace_settings(server)["trace_rate"] == "11"

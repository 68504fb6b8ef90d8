"""The checks perf_analyzer 2.60 makes as it reads its command line, made once (perfkit/cli/_flag_checks.py)
and by both commands: `perfkit profile` refuses with perfkit's usage code (2) and a line naming the flag and
the value, the `perf_analyzer` command with 2.60's code (99) and words. The URL is unreachable: a command
line that got past the checks would fail differently (exit 4, or 99 with "unreachable"), so each case also
shows that nothing reached a server. Rules and messages: triton-inference-server/perf_analyzer
src/command_line_parser.cc (ParseCommandLine, VerifyOptions); the QA lines' 2.60 outcomes are recorded in
tests/pa_compat/qa_cases.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfkit.cli import main as perfkit_main
from perfkit.cli._flag_checks import VALUE_CHECKS, check_flags, readings
from perfkit.cli.pa import main as pa_main
from perfkit.errors import ExitCode, UsageError

_NOWHERE = ["-m", "nomodel", "-u", "127.0.0.1:1"]
_PCT = "Failed to parse --percentile. The value must be -1 for not reporting or in range (0, 100)."

# (args, 2.60's words, what perfkit profile's line names): the issue's examples and one bad value per rule
REFUSED = [
    (["--percentile", "225"], _PCT, "--percentile 225: the value must be in (0, 100), or -1 for none"),
    (["--percentile", "0"], _PCT, "--percentile 0:"),
    (["-l", "-1"], "Failed to parse --latency-threshold (-l). The value must be >= 0 msecs.", "-l -1: the value must"),
    (["--warmup-request-count", "-2"], "Failed to parse --warmup-request-count. The value must be >= 0.",
     "--warmup-request-count -2: the value must be >= 0"),
    (["--sequence-length-variation", "-10"], "Failed to parse --sequence-length-variation. The value must be >= 0.0.",
     "--sequence-length-variation -10: the value must be >= 0 percent"),
    (["--shape", "input_name:-1,2,3"], "Failed to parse --shape. The dimensions of input tensor must be > 0.",
     "--shape input_name:-1,2,3: the value must be > 0 per dim"),
    (["--shape", "input_name"], "Failed to parse --shape. There must be a colon after input name.",
     "--shape input_name: expected NAME:D1,D2"),
    (["--metrics-url", "x:1/metrics"], "Must specify --collect-metrics when using the --metrics-url option.",
     "--metrics-url x:1/metrics: needs --collect-metrics"),
    (["--metrics-interval", "100"], "Must specify --collect-metrics when using the --metrics-interval option.",
     "--metrics-interval 100: needs --collect-metrics"),
    (["-a", "--sync"], "Cannot specify --async and --sync simultaneously.", "-a/--async and --sync"),
    (["--binary-search", "--concurrency-range", "1:8"], "The --latency-threshold cannot be 0 for binary search mode.",
     "--binary-search needs -l"),
    (["--binary-search", "-l", "10", "--concurrency-range", "1:0"],
     "The end of the range can not be 0 (or 0.0) for binary search mode.", "--binary-search: the range needs an end"),
    (["--binary-search", "-l", "10", "--concurrency-range", "8"],
     "The end of the range can not be less than start of the range for binary search mode.",
     "--binary-search: the range needs START:END"),
    (["--concurrency-range", "1:0"],
     "The end of the search range and the latency limit can not be both 0 (or 0.0) simultaneously",
     "a range ending at 0 (no end) needs -l"),
    (["--concurrency-range", "0:4"], "The start of the search range must be > 0", "--concurrency-range 0:4: the start"),
    (["--request-rate-range", "0:10"],
     "Failed to parse --request-rate-range. The start of the search range must be > 0.",
     "--request-rate-range 0:10: the start must be > 0"),
    (["--warmup-request-count", "5", "--concurrency-range", "1:4"],
     "--warmup-request-count not supported with multiple concurrency values in one run",
     "--warmup-request-count 5: not with several concurrency values"),
    (["--warmup-request-count", "5", "--request-rate-range", "10:20:5"],
     "--warmup-request-count not supported with multiple request rate values in one run",
     "--warmup-request-count 5: not with several request rates"),
    (["--sequence-id-range", "-1:5"], "Failed to parse --sequence-id-range. The range values must be >= 0.",
     "--sequence-id-range -1:5: the value must be >= 0"),
    (["--sequence-id-range", "9:5"],
     "Failed to parse --sequence-id-range. The 'end' value must be greater than 'start' value.",
     "--sequence-id-range 9:5: the end must not be below the start"),
    *[
        ([check.spellings[0], "-2"], check.pa_message, f"{check.spellings[0]} -2: the value must be {check.range_text}")
        for check in VALUE_CHECKS
        if check.spellings[0] not in ("--trace-count", "--log-frequency")  # trace flags: refused by profile anyway
    ],
]  # fmt: skip


@pytest.mark.parametrize(("args", "pa_says", "perfkit_says"), REFUSED, ids=[" ".join(a) for a, _, _ in REFUSED])
def test_both_commands_refuse_before_any_server(
    args: list[str],
    pa_says: str,
    perfkit_says: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PERFKIT_EXIT_CODES", raising=False)
    assert pa_main([*_NOWHERE, *args]) == 99
    assert capsys.readouterr().err.strip().splitlines() == [f"perfkit: error: {pa_says}"]
    assert perfkit_main(["profile", *_NOWHERE, *args]) == ExitCode.USAGE
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"perfkit: error: {perfkit_says}"), line


@pytest.mark.parametrize("drop_in", [True, False])
@pytest.mark.parametrize(
    "args",
    [
        ["-l", "0", "-s", "0", "--percentile", "99"],  # 0 is no limit, -s 0 a valid threshold
        ["--binary-search", "-l", "10", "--concurrency-range", "1:8"],
        ["--concurrency-range", "1:0", "-l", "10"],  # no end, but a latency limit
        ["--warmup-request-count", "5", "--concurrency-range", "4"],
        ["--warmup-request-count", "5", "--concurrency-range", "1:4", "--request-rate-range", "10"],  # the rate counts
        ["--collect-metrics", "--metrics-url", "x:1/metrics", "--metrics-interval", "50"],
        ["--shape", "a:1,2,3", "--sequence-id-range", "5:9", "--sequence-length-variation", "0"],
        ["-a"],
        ["--sync"],
        ["-i", "grpc", "--streaming"],
    ],
)
def test_what_260_accepts_passes_the_checks(args: list[str], drop_in: bool) -> None:
    check_flags(args, drop_in=drop_in)


def test_profile_goes_beyond_perf_analyzer_where_it_can() -> None:
    """HTTP streaming (generate_stream) and request parameters over HTTP are perfkit profile's: only the drop-in
    refuses them, as 2.60; a fractional --percentile is perfkit's (the drop-in reads it with atoi)."""
    for args in (["--streaming"], ["--request-parameter", "a:1:int"], ["--percentile", "99.9"]):
        check_flags(args, drop_in=False)
    with pytest.raises(UsageError, match="Streaming is only allowed with gRPC"):
        check_flags(["--streaming"], drop_in=True)
    with pytest.raises(UsageError, match="only supported by gRPC"):
        check_flags(["--request-parameter", "a:1:int"], drop_in=True)
    with pytest.raises(UsageError, match="must be > 0 ms"):  # profile reads -p 0.5 as 0.5, 2.60 as 0 (refused)
        check_flags(["-p", "-0.5"], drop_in=False)
    with pytest.raises(UsageError, match=r"Failed to parse --measurement-interval \(-p\)"):
        check_flags(["-p", "0.5"], drop_in=True)


def test_readings_that_are_not_refusals() -> None:
    """2.60 runs `--percentile -1` (no percentile) and `--sequence-length 0` (a warning; its default used)."""
    warned: list[str] = []
    args = readings(["--percentile", "-1", "--sequence-length", "0", "-m", "x", "--percentile=95"], warned.append)
    assert args == ["-m", "x", "--percentile", "95"]
    assert warned == [
        "WARNING: The sequence length must be > 0. Perf Analyzer will use default value if it is measuring on"
        " sequence model."
    ]
    assert readings(["--sequence-length", "20"], warned.append) == ["--sequence-length", "20"] and len(warned) == 1


@pytest.mark.parametrize("args", [["--percentile", "-1"], ["--sequence-length", "0"]])
def test_profile_runs_what_260_runs(
    args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the checks: the unreachable server is what stops it (exit 4), not the value."""
    monkeypatch.delenv("PERFKIT_EXIT_CODES", raising=False)
    assert perfkit_main(["profile", *_NOWHERE, *args]) == ExitCode.SERVER
    assert "unreachable" in capsys.readouterr().err


_QA = json.loads((Path(__file__).resolve().parents[2] / "pa_compat" / "qa_cases.json").read_text())["cases"]
_PLACES = {k: k for k in ("inputdata", "pa_compat", "testdata", "models", "work", "tritonserver_dir")}
_MESSAGES = {c.pa_message for c in VALUE_CHECKS}


@pytest.mark.parametrize("case", [c for c in _QA if not c.get("skip")], ids=lambda c: str(c["id"]))
def test_qa_lines_checked_as_260_ended(case: dict[str, object]) -> None:
    """NVIDIA's QA lines: one 2.60 measured passes the checks in both commands; one 2.60 refused with a message
    of the table is refused by both, the drop-in in 2.60's words."""
    argv = [str(a).format(**_PLACES) for a in case["argv"]]  # type: ignore[attr-defined]  # a case's "argv" is a JSON list (typed object here)
    outcome = case["perf_analyzer_2.60"]
    assert isinstance(outcome, dict)
    argv = readings(argv, lambda _: None)
    said = str(outcome.get("message", "")).removeprefix("Error: ")
    if outcome["returncode"] in (0, 2):
        check_flags(argv, drop_in=True)
        check_flags(argv, drop_in=False)
    elif said in _MESSAGES:
        with pytest.raises(UsageError) as err:
            check_flags(argv, drop_in=True)
        assert str(err.value) == said
        with pytest.raises(UsageError):
            check_flags(argv, drop_in=False)


@pytest.mark.parametrize(
    ("args", "pa_says", "perfkit_says"),
    [
        (["--concurrency-range", "8"], "--request-count can not be less than concurrency",
         "--request-count 5 can not be less than concurrency 8"),
        (["--concurrency-range", "1:4"], "--request-count not supported with multiple concurrency values in one run",
         "--request-count 5: not supported with several load values in one run"),
        (["--request-rate-range", "10"], "--request-count can not be less than request rate",
         "--request-count 5 can not be less than request rate 10"),
        (["--request-rate-range", "1:4"], "--request-count not supported with multiple request rate values in one run",
         "--request-count 5: not supported with several load values in one run"),
    ],
)  # fmt: skip
def test_request_count_rules_in_both_commands(
    args: list[str],
    pa_says: str,
    perfkit_says: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PERFKIT_EXIT_CODES", raising=False)
    assert pa_main([*_NOWHERE, "--request-count", "5", *args]) == 99
    assert capsys.readouterr().err.strip().splitlines() == [f"perfkit: error: {pa_says}"]
    assert perfkit_main(["profile", *_NOWHERE, "--request-count", "5", *args]) == ExitCode.USAGE
    assert capsys.readouterr().err.strip().splitlines() == [f"perfkit: error: {perfkit_says}"]

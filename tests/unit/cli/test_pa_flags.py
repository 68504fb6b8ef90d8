"""perf_analyzer's flags on `perfkit profile`: the table covers every one, the documentation shows the table,
and perf_analyzer's getopt forms are read as perf_analyzer reads them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfkit.cli._pa_compat import normalize_argv, to_pa_exit_code
from perfkit.cli._pa_flags import BY_SPELLING, PA_FLAGS, render_markdown
from perfkit.cli.profile import command as profile_command
from perfkit.errors import ExitCode, UsageError

ROOT = Path(__file__).resolve().parents[3]
OPTIONS = json.loads((Path(__file__).parents[2] / "pa_compat" / "perf_analyzer_options.json").read_text())


def test_every_perf_analyzer_option_has_a_row() -> None:
    long_names = {f"--{o['name']}" for o in OPTIONS["long_options"]}
    short_names = {f"-{c}" for c in OPTIONS["getopt_short"].replace(":", "")}
    doc_names = {h.split("=")[0].split(" ")[0] for h in OPTIONS["cli_md_headings"]}
    missing = sorted((long_names | short_names | doc_names) - set(BY_SPELLING))
    assert not missing, f"perf_analyzer flags without a row in perfkit/cli/_pa_flags.py: {missing}"


def test_value_taking_matches_perf_analyzer() -> None:
    for o in OPTIONS["long_options"]:
        flag = BY_SPELLING[f"--{o['name']}"]
        assert flag.takes_value == o["takes_value"], o["name"]
    short = OPTIONS["getopt_short"]
    for i, c in enumerate(short):
        if c == ":":
            continue
        takes = i + 1 < len(short) and short[i + 1] == ":"
        assert BY_SPELLING[f"-{c}"].takes_value == takes, c


def test_docs_table_is_the_code_table() -> None:
    """The flag table people read is rendered from the registry when the documentation is built."""
    import importlib.util

    page = (ROOT / "docs" / "reference" / "perf-analyzer-flags.md").read_text()
    assert "<!-- generated: pa-flags -->" in page, "the perf_analyzer flag page lost its generated table"
    spec = importlib.util.spec_from_file_location("docs_reference_hook", ROOT / "docs" / "hooks" / "reference.py")
    assert spec and spec.loader
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    assert render_markdown().strip() in hook.expand(page), "the documentation's flag table is not the code table"
    readme = (ROOT / "README.md").read_text()
    assert "(docs/reference/perf-analyzer-flags.md)" in readme, "the README does not link the flag table"


def test_same_and_differs_flags_exist_on_profile() -> None:
    """A flag the table says perfkit acts on is a real option of `perfkit profile` (after rewriting)."""
    names = {o for p in profile_command.params for o in (*p.opts, *p.secondary_opts)}
    for f in PA_FLAGS:
        # flags whose every value the normaliser reads itself (--measurement-mode) need no option
        if f.status in ("same", "differs") and not f.noop_values and f.spellings[0] != "-?":
            for s in f.spellings:
                if s in ("-h", "--help"):
                    continue
                assert s in names, f"{s} is marked {f.status} but `perfkit profile` has no such option"


_BIN = ["--output-tensor-format", "binary"]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ("-p2000 -s 100", ["-p", "2000", "-s", "100"]),
        ("-i GRPC -m m", ["-i", "grpc", "-m", "m"]),
        ("-t5", ["--concurrency-range", "5"]),
        ("-t 2 -b 64", ["--concurrency-range", "2", "-b", "64"]),
        ("--shared-memory=SYSTEM", ["--shared-memory", "system"]),
        ("--string-data=1", ["--string-data", "1"]),
        ("-vvp1000", ["-v", "-v", "-p", "1000"]),
        ("-z", ["--input-data", "zero"]),
        ("--data-directory d", ["--input-data", "d"]),
        ("-a --sync --async", []),
        ("--ssl-grpc-use-ssl --ssl-https-verify-peer=0", ["--ssl-grpc-use-ssl", "--ssl-https-verify-peer", "0"]),
        ("--service-kind=triton --grpc-compression-algorithm GZIP", ["--grpc-compression-algorithm", "gzip"]),
        (
            "--input-tensor-format JSON --output-tensor-format=binary",
            ["--input-tensor-format", "json", "--output-tensor-format", "binary"],
        ),
        (
            "--measurement-mode COUNT_WINDOWS --measurement-request-count 50",
            ["--measurement-mode", "count_windows", "--measurement-request-count", "50"],
        ),
        ("--request-distribution POISSON", ["--request-distribution", "poisson"]),
        ("-o o.json --workers 2 --model-repository r", ["-o", "o.json", "--workers", "2", "--model-repository", "r"]),
        ("-- -t5", ["--", "-t5"]),
    ],
)
def test_normalize(argv: str, expected: list[str]) -> None:
    assert normalize_argv(argv.split())[0] == expected


def test_noops_are_noted() -> None:
    _, notes = normalize_argv(["-a", "--sync", "--max-threads", "8"])
    assert notes[0].startswith("-a: perfkit is always asynchronous")
    assert notes[1].startswith("--sync:")
    assert notes[2].startswith("--max-threads 8:")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        ("--service-kind triton_c_api", "C API"),
        ("--service-kind=tfserving", "KServe v2"),
        ("--enable-mpi", "--ray"),
        ("-c 8", "--concurrency-range"),
        ("-d", "--concurrency-range"),
        ("--trace-level TIMESTAMPS", "trace"),
    ],
)
def test_refused_with_reason(argv: str, says: str) -> None:
    with pytest.raises(UsageError) as err:
        normalize_argv(argv.split())
    assert says in str(err.value)


def test_refused_flag_exits_2_with_one_line() -> None:
    from perfkit.cli import main

    rc = main(["profile", "-m", "identity", "-v", "--enable-mpi"])
    assert rc == ExitCode.USAGE


def test_pa_exit_code_mapping() -> None:
    from perfkit.cli._pa_compat import PA_STABILITY_ERROR_MARK

    assert to_pa_exit_code(ExitCode.OK) == 0
    assert to_pa_exit_code(PA_STABILITY_ERROR_MARK) == 2
    for code in (ExitCode.USAGE, ExitCode.INPUT, ExitCode.SERVER, ExitCode.MEASUREMENT, ExitCode.INTERNAL):
        assert to_pa_exit_code(code) == 99
    assert to_pa_exit_code(ExitCode.INTERRUPTED) == 130


def test_env_maps_usage_error_to_99(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from perfkit.cli import main

    monkeypatch.setenv("PERFKIT_EXIT_CODES", "perf_analyzer")
    assert main(["profile", "-m", "identity", "--service-kind", "triton_c_api"]) == 99
    err = capsys.readouterr().err
    assert "--service-kind triton_c_api: the C API" in err
    assert len([ln for ln in err.splitlines() if ln.strip()]) == 1


def test_headers_reach_the_http_request_and_the_spec() -> None:
    from perfkit.cli._pa_compat import pa_spec_fields
    from perfkit.loadgen import ModelIO, Tensor, http_payload

    kw = {"pa_verbose": 0, "string_data": None, "bls_composing_models": "a:3,b", "http_headers": ("X-A: 1", "b:two")}
    kw["profile_export_file"] = None
    kw["grpc_compression"] = "gzip"
    kw["input_tensor_format"] = kw["output_tensor_format"] = "json"
    fields = pa_spec_fields(dict(kw))
    assert fields["http_headers"] == (("X-A", "1"), ("b", "two"))
    assert fields["bls_composing_models"] == ("a", "b")
    io = ModelIO("m", "", 0, (("I", "INT32", (1,)),), ("O",))
    raw = http_payload(io, [Tensor("I", "INT32", (1,), b"\0\0\0\0")], "h:1", headers=fields["http_headers"])
    head = raw.split(b"\r\n\r\n", 1)[0].decode()
    assert "\r\nX-A: 1\r\n" in head and head.endswith("\r\nb: two")
    with pytest.raises(UsageError):
        pa_spec_fields(dict(kw, http_headers=("no-colon",)))


def test_perf_analyzer_command_defaults() -> None:
    from perfkit.cli.pa import pa_defaults

    assert pa_defaults(["-m", "m"]) == [
        *("-p", "5000", "-r", "10", "--stop-rule", "stability", "--warmup", "0"),
        *("--tail-percentiles", "", "-u", "localhost:8000"),
    ]
    assert pa_defaults(["-m", "m", "-i", "GRPC", "-p2000", "-r", "3", "--stop-rule", "precision", "--warmup", "1"]) == [
        "--tail-percentiles",
        "",
        "-u",
        "localhost:8001",
    ]
    assert pa_defaults(["-m", "m", "-u", "h:1", "--measurement-mode=count_windows"])[:2] == ["-p", "5000"]
    with pytest.raises(UsageError):
        pa_defaults(["-m", "m", "--enable-mpi"])


def test_perf_analyzer_command_version_and_refusal(capsys: pytest.CaptureFixture[str]) -> None:
    from perfkit.cli.pa import main

    assert main(["--version"]) == 0
    assert "perfkit" in capsys.readouterr().out
    assert main(["-m", "m", "--service-kind", "torchserve"]) == 99
    assert "--service-kind torchserve" in capsys.readouterr().err

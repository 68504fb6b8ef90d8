"""perf_analyzer's --request-count: a level is one window of exactly N requests, against the real Triton."""

from __future__ import annotations

import pytest

from perfkit.cli import main
from perfkit.errors import ExitCode
from perfkit.records import RunRecord


@pytest.mark.parametrize("load", [["--concurrency-range", "4"], ["--request-rate-range", "100"]])
def test_request_count_measures_exactly_n_requests(triton, tmp_path, load):
    out = tmp_path / "run.json"
    rc = main(["profile", "-m", "identity", "-u", triton.endpoints.http_url, *load, "--request-count", "150",
               "-o", str(out)])  # fmt: skip
    assert rc == ExitCode.OK
    (level,) = RunRecord.load(out).levels
    assert level.request_count == 150 and level.error_count == 0
    assert len(level.windows) == 1 and level.windows[0].completed == 150
    assert level.stable


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--concurrency-range", "1:4"], "several load values"),
        (["--concurrency-range", "8", "--request-count", "4"], "less than"),
    ],
)
def test_request_count_rules(argv, says, capsys):
    rc = main(["profile", "-m", "identity", "-u", "127.0.0.1:1", "--request-count", "5", *argv])
    assert rc == ExitCode.USAGE
    assert says in capsys.readouterr().err

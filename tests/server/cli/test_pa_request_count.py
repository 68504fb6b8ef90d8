"""perf_analyzer's --request-count: a level is one window of exactly N requests, against the real Triton."""

from __future__ import annotations

import json

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


def test_count_windows_hold_the_request_count(triton, tmp_path):
    """--measurement-mode count_windows: each window ends at the first whole second by which it holds
    --measurement-request-count requests. sleeper takes 10 ms a request: one at a time, a second holds
    at most 100, so 150 need windows of 2 s or more; the export's window boundaries are those windows."""
    out, export = tmp_path / "run.json", tmp_path / "export.json"
    rc = main(["profile", "-m", "sleeper", "-u", triton.endpoints.http_url, "--concurrency-range", "1",
               "--measurement-mode", "count_windows", "--measurement-request-count", "150", "-r", "3",
               "--profile-export-file", str(export), "-o", str(out)])  # fmt: skip
    assert rc == ExitCode.OK
    (level,) = RunRecord.load(out).levels
    assert len(level.windows) >= 1
    for w in level.windows:
        assert w.completed >= 150, w
        assert w.duration_s >= 2.0 and abs(w.duration_s - round(w.duration_s)) < 1e-6, w
    bounds = json.loads(export.read_text())["experiments"][0]["window_boundaries"]
    assert len(bounds) == len(level.windows) + 1
    assert [round((b - a) / 1e9, 6) for a, b in zip(bounds, bounds[1:])] == [
        round(w.duration_s, 6) for w in level.windows
    ]


def test_count_windows_request_count_must_be_positive(capsys):
    rc = main(["profile", "-m", "identity", "-u", "127.0.0.1:1", "--measurement-mode", "count_windows",
               "--measurement-request-count", "0"])  # fmt: skip
    assert rc == ExitCode.USAGE
    assert "--measurement-request-count" in capsys.readouterr().err


def test_count_windows_not_with_ray(capsys):
    rc = main(["profile", "-m", "identity", "-u", "127.0.0.1:1", "--ray", "auto", "--measurement-mode",
               "count_windows"])  # fmt: skip
    assert rc == ExitCode.USAGE
    assert "--ray" in capsys.readouterr().err

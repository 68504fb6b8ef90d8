"""A report from a real `perfkit profile` and a real `perfkit tune` run, end to end.

Both commands run as a user runs them (subprocesses, the bundled server launched on a copy of
the fixtures), with --report; the pages are then checked for the numbers the runs measured and
opened in headless Chromium (skipped where it cannot be installed).
"""

from __future__ import annotations

import html
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfkit.records import RunRecord, TuneRecord, from_dict
from tests.conftest import CHEAP_CONFIRM, require
from tests.unit.report.test_report_browser import ALLOWED_SCHEMES, CHROMIUM, CHROMIUM_HOW, open_report

pytestmark = [pytest.mark.usefixtures("tritonserver"), pytest.mark.slow]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, "-m", "perfkit", *args], capture_output=True, text=True, env=env, timeout=400
    )


def _text(page: Path) -> str:
    return html.unescape(page.read_text())


@pytest.mark.timeout(600)
def test_report_from_real_profile_and_tune_run_end_to_end(model_repo: Path, tmp_path: Path):
    run_json, profile_html = tmp_path / "run.json", tmp_path / "profile.html"
    out = _run("profile", "-m", "batcher", "--model-repository", str(model_repo), "--model", "batcher",
               "--concurrency-range", "1:2", "-p", "400", "-r", "3", "--percentile", "99",
               "-o", str(run_json), "--report", str(profile_html))  # fmt: skip
    assert out.returncode == 0, out.stderr
    record = RunRecord.load(run_json)
    page = _text(profile_html)
    assert "batcher" in page and record.server.version in page
    for lv in record.levels:  # the numbers behind the figures are the measured ones
        assert f"{lv.throughput_infer_per_s:,.1f}" in page or f"{lv.throughput_infer_per_s:.1f}" in page

    # The budget is one this fixture meets with room on a loaded machine (beside the suite's other workers
    # a 25 ms budget at concurrency 4 could leave no trial, or no confirmed pick, to report): this test is
    # about the report of a tune, not about the tune's verdict on a budget.
    tune_dir, tune_html = tmp_path / "tune", tmp_path / "tune.html"
    out = _run("tune", "-m", "batcher", "--model-repository", str(model_repo), "-o", str(tune_dir),
               "--latency-budget", "100ms", "--load", "concurrency", "--max-concurrency", "4",
               "--measurement-interval", "300",
               "--max-batch-sizes", "8", "--instance-counts", "1,2", "--precisions", "fp32",
               "--no-dynamic-batching", "--trials", "3", "--search", "measure", *CHEAP_CONFIRM, "--report",
               str(tune_html))  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    tune = from_dict(TuneRecord, json.loads((tune_dir / "tune.json").read_text()))
    page = _text(tune_html)
    best = next(t for t in tune.trials if t.number == tune.best_trial)
    assert f"trial {best.number}" in page.lower() and "100 ms budget" in page

    # the same pages made again later from the saved records, with no server, are the same reports
    again = tmp_path / "again.html"
    assert _run("report", str(tune_dir), "-o", str(again)).returncode == 0
    assert f"trial {best.number}" in _text(again).lower()

    require("chromium", CHROMIUM, f"{CHROMIUM_HOW}; the pages were checked for content only")
    for path in (profile_html, tune_html):
        loaded = open_report(path, tmp_path / f"chromium-{path.stem}")
        assert loaded["console_errors"] == [] and loaded["exceptions"] == []
        assert [u for u in loaded["requests"] if not u.startswith(ALLOWED_SCHEMES)] == []

"""scripts/test.sh's list of failed tests: under its runs, each failed test's id is written to the
file PERFKIT_FAILED_LIST names, so that the test is run once more alone (tests/conftest.py installs
this hook; a crashed xdist worker's test is listed by the controller)."""

from __future__ import annotations

import os

import pytest

_FAILED_LIST = os.environ.get("PERFKIT_FAILED_LIST")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Under a run of scripts/test.sh, write each failed test's id (a failed setup or teardown too)."""
    if _FAILED_LIST and report.failed:
        with open(_FAILED_LIST, "a", encoding="utf-8") as f:
            f.write(report.nodeid + "\n")

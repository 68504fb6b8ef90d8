"""scripts/test.sh's list of failed tests: under its runs, each failed test's id is written to the
file PERFKIT_FAILED_LIST names, so that the test is run once more alone (tests/conftest.py installs
this hook; a crashed xdist worker's test is listed by the controller)."""

from __future__ import annotations

import os

import pytest

_FAILED_LIST = os.environ.get("PERFKIT_FAILED_LIST")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Under a run of scripts/test.sh, write each failed test's id (a failed setup or teardown too)."""
    # Only this suite's tests (ids under tests/): a pytest that a test runs in a child process inherits
    # the variable, and its own tests (ids such as "::test_x", from another rootdir) are not ours.
    if _FAILED_LIST and report.failed and report.nodeid.startswith("tests/"):
        with open(_FAILED_LIST, "a", encoding="utf-8") as f:
            f.write(report.nodeid + "\n")

"""scripts/test.sh's re-run policy, the pytest side (tests/conftest.py registers this plugin).

Only a test marked `quiet` (a verdict on measurement noise) or `flaky(reason=...)` (a known race,
with what would fix it) may be run again alone after it fails; any other failure fails the suite.
Under test.sh's runs this plugin writes, to the file PERFKIT_FAILED_LIST names, one line per test
it may run again (`may-rerun<TAB>id<TAB>reason`, at collection: a test whose xdist worker crashes
is known too) and one per failed test (`failed<TAB>id`). Under a re-run (PERFKIT_RERUN names the run
the failures came from), a test that passes is recorded: a JUnit property (`flaky_rerun`) and a line
`id<TAB>reason<TAB>run` in the file PERFKIT_FLAKY_LIST names (scripts/test.sh's flaky.txt).

A `flaky` mark without a reason is a collection error: a flaky test nobody says how to fix is a
failure hidden, which is what this policy exists to stop.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

FAILED_LIST = "PERFKIT_FAILED_LIST"
RERUN = "PERFKIT_RERUN"
FLAKY_LIST = "PERFKIT_FLAKY_LIST"
PROPERTY = "flaky_rerun"
QUIET_REASON = "quiet: a verdict on measurement noise, judged again on a quiet machine"
MARKERS = (
    "quiet: asserts a verdict on measurement noise or a latency budget: scripts/test.sh runs these alone,"
    " after the parallel run, and once more alone if they fail",
    "flaky(reason): a known race, with what would fix it (reason= is required): scripts/test.sh runs the"
    " test once more alone if it fails, and lists a pass there in flaky.txt",
)


def _ours(nodeid: str) -> bool:
    # Only this suite's tests (ids under tests/): a pytest that a test runs in a child process inherits
    # the variables, and its own tests (ids such as "::test_x", from another rootdir) are not ours.
    return nodeid.startswith("tests/")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def flaky_reason(item: pytest.Item) -> str | None:
    """Why the item may be run again alone (its `flaky` reason, or the `quiet` one), or None."""
    mark = item.get_closest_marker("flaky")
    if mark is not None:
        return _one_line(str(mark.kwargs.get("reason", "")))
    if item.get_closest_marker("quiet") is not None:
        return QUIET_REASON
    return None


def _unreasoned(item: pytest.Item) -> bool:
    return any(not str(m.kwargs.get("reason", "")).strip() or m.args for m in item.iter_markers("flaky"))


def _append(variable: str, line: str) -> None:
    path = os.environ.get(variable)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:  # pyproject.toml registers them too; a suite of its own (test_test_script) has only this
        config.addinivalue_line("markers", line)


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    """A collector whose tests carry `flaky` without reason=... fails to collect, naming them."""
    report = yield
    if report.passed:
        bad = [i.nodeid for i in report.result if isinstance(i, pytest.Item) and _unreasoned(i)]
        if bad:
            report.outcome = "failed"
            report.longrepr = (
                "@pytest.mark.flaky needs reason='...' (one keyword: the race, and what would fix it): "
                + ", ".join(bad)
            )
            report.result = []
    return report


def pytest_collection_finish(session: pytest.Session) -> None:
    """Under test.sh, list the collected tests that may be run again alone, with their reason."""
    for item in session.items:
        reason = flaky_reason(item)
        if reason is not None and _ours(item.nodeid):
            _append(FAILED_LIST, f"may-rerun\t{item.nodeid}\t{reason}")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Under test.sh, list each failed test (a failed setup or teardown too; a crashed xdist worker's
    test is reported by the controller)."""
    if report.failed and _ours(report.nodeid):
        _append(FAILED_LIST, f"failed\t{report.nodeid}")


_CALL_PASSED: dict[str, str] = {}  # a re-run's tests whose call passed, with their reason (one process: no xdist)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Under a re-run, a test whose call passed gets the JUnit property `flaky_rerun` (set before its
    teardown's report, which carries the test's properties into the XML); once its teardown passed
    too, it is listed in flaky.txt."""
    report = yield
    run = os.environ.get(RERUN)
    if not run or not _ours(item.nodeid) or not report.passed:
        return report
    if report.when == "call":
        reason = flaky_reason(item) or "not marked quiet or flaky"
        _CALL_PASSED[item.nodeid] = reason
        item.user_properties.append((PROPERTY, f"passed alone after failing in the {run} run: {reason}"))
    elif report.when == "teardown" and item.nodeid in _CALL_PASSED:
        _append(FLAKY_LIST, f"{item.nodeid}\t{_CALL_PASSED.pop(item.nodeid)}\t{run}")
    return report

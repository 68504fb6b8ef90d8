"""scripts/test.sh's runs on a small suite of its own, and .ci/run's re-run list.

Only a test marked `quiet` or `flaky(reason=...)` that fails is run again alone: a pass there keeps
the suite green and is listed (flaky.txt: id, reason, run; a JUnit property; .ci/run's re-run list);
failing again fails the suite. Any other failure fails the suite, even one that would pass alone.
A `flaky` mark without a reason is a collection error. Each failure kind the re-run must take: a
parameter id with spaces, brackets, '::' and non-ASCII characters, a failed setup, a crashed xdist
worker, and an id that is not there any more when the test is run again (pytest's exit 4 for it):
none of them may end the suite with a usage error.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.support.reruns import QUIET_REASON

ROOT = Path(__file__).resolve().parents[2]

CONFTEST = """
import reruns


def pytest_configure(config):
    config.pluginmanager.register(reruns, "perfkit-reruns")
"""
PYTEST_INI = "[pytest]\ntestpaths = tests\naddopts = -p no:cacheprovider\n"
ONCE = """
import os
from pathlib import Path

import pytest

STATE = Path(os.environ["SUITE_STATE"])
RACE = pytest.mark.flaky(reason="a race: wait on its event")


def first_time(name):
    mark = STATE / name
    first = not mark.exists()
    mark.touch()
    return first
"""
FLAKY = (
    ONCE
    + """

def test_passes():
    pass


@RACE
def test_fails_the_first_time():
    assert not first_time("plain")


@RACE
@pytest.mark.parametrize("value", ["a b[c]::d \\u00e9"])
def test_an_odd_id_fails_the_first_time(value):
    assert not first_time("odd")


@pytest.fixture
def set_up():
    assert not first_time("setup")


@RACE
def test_its_setup_fails_the_first_time(set_up):
    pass


@RACE
def test_its_worker_crashes_the_first_time():
    if first_time("crash"):
        os._exit(3)


GENERATION = STATE / "generation"
GENERATION.touch()


@RACE
@pytest.mark.parametrize("generation", [GENERATION.read_text() or "one"])
def test_its_id_changes_after_the_first_time(generation):
    GENERATION.write_text("two")
    assert generation == "two"


@pytest.mark.quiet
def test_quiet_fails_the_first_time():
    assert not first_time("quiet")
"""
)
UNMARKED = (
    ONCE
    + """

def test_passes():
    pass


def test_fails_the_first_time_unmarked():
    assert not first_time("unmarked")


def test_its_worker_crashes_the_first_time_unmarked():
    if first_time("crash"):
        os._exit(3)


@RACE
def test_flaky_fails_every_time():
    assert False


@pytest.mark.quiet
def test_quiet_fails_every_time():
    assert False
"""
)
NO_REASON = """
import pytest


def test_passes():
    pass


@pytest.mark.flaky
def test_marked_flaky_without_a_reason():
    pass
"""


def _suite(tmp_path: Path, tests: str) -> Path:
    """A checkout holding scripts/test.sh and .ci/run, do-nothing setup and code-health tools, the
    re-run plugin and `tests`."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    (repo / ".ci").mkdir()
    shutil.copy(ROOT / "scripts" / "test.sh", repo / "scripts" / "test.sh")
    shutil.copy(ROOT / ".ci" / "run", repo / ".ci" / "run")
    for script in ("setup.sh", "system-deps.sh", "llm-deps.sh"):
        (repo / "scripts" / script).write_text("exit 0\n")
    bin_dir = repo / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for tool, body in {"python": f'exec "{sys.executable}" "$@"', "ruff": "exit 0", "mypy": "exit 0"}.items():
        (bin_dir / tool).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / tool).chmod(0o755)
    (bin_dir / "mkdocs").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "mkdocs").chmod(0o755)
    (repo / "tests").mkdir()
    shutil.copy(ROOT / "tests" / "support" / "reruns.py", repo / "tests" / "reruns.py")
    (repo / "tests" / "conftest.py").write_text(CONFTEST)
    (repo / "tests" / "test_one.py").write_text(textwrap.dedent(tests))
    (repo / "tests" / "test_two.py").write_text("def test_beside():\n    pass\n")
    (repo / "pytest.ini").write_text(PYTEST_INI)
    (tmp_path / "state").mkdir()
    return repo


def _run(repo: Path, command: str = "scripts/test.sh") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PERFKIT_"))}
    env.update(PERFKIT_TEST_WORKERS="2", SUITE_STATE=str(repo.parent / "state"))
    return subprocess.run(
        ["bash", command], cwd=repo, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def _flaky_txt(repo: Path) -> list[list[str]]:
    return [line.split("\t") for line in (repo / "test-reports" / "flaky.txt").read_text().splitlines()]


def test_marked_tests_that_fail_once_are_run_again_alone_listed_and_the_suite_passes(tmp_path: Path) -> None:
    repo = _suite(tmp_path, FLAKY)
    done = _run(repo, ".ci/run")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "5 test(s) marked quiet or flaky failed in the parallel run; each again, alone:" in out
    flaky = [
        "test_one.py::test_fails_the_first_time",
        "test_one.py::test_an_odd_id_fails_the_first_time[a b[c]::d \\xe9]",
        "test_one.py::test_its_setup_fails_the_first_time",
        "test_one.py::test_its_worker_crashes_the_first_time",
        "test_one.py::test_its_id_changes_after_the_first_time[one]",
    ]
    for listed in flaky:
        assert f"  tests/{listed}\n" in out
    # the changed id is not found again: the failures are run by test function
    assert "pytest did not find every id again; by test function:" in out
    assert "  tests/test_one.py::test_its_id_changes_after_the_first_time\n" in out
    quiet = "tests/test_one.py::test_quiet_fails_the_first_time"
    assert f"1 test(s) marked quiet or flaky failed in the quiet run; each again, alone:\n  {quiet}\n" in out
    # each pass on its re-run is listed: id, reason, the run it failed in
    race = "a race: wait on its event"
    changed = "tests/test_one.py::test_its_id_changes_after_the_first_time[two]"  # its id when run again
    passed_again = [f"tests/{t}" for t in flaky[:4]] + [changed]
    listed = _flaky_txt(repo)
    assert sorted(listed) == sorted([[t, race, "parallel"] for t in passed_again] + [[quiet, QUIET_REASON, "quiet"]])
    # and in the re-run's JUnit XML, as a property of each test case
    xml = ET.parse(repo / "test-reports" / "junit-rerun-parallel.xml")
    props = {
        case.get("name"): [p.get("value") for p in case.iter("property") if p.get("name") == "flaky_rerun"]
        for case in xml.iter("testcase")
    }
    assert props["test_fails_the_first_time"] == [f"passed alone after failing in the parallel run: {race}"]
    assert len(props) == len(flaky)
    # .ci/run ends with the re-run list (then nothing failed)
    tail = out[out.index("== re-run list") :]
    assert tail.startswith("== re-run list: 6 test(s) passed only when run again alone")
    assert f"  {quiet}  (failed in the quiet run; {QUIET_REASON})" in tail
    assert "== failed" not in out


def test_unmarked_failures_fail_the_suite_and_marked_ones_that_fail_again_too(tmp_path: Path) -> None:
    repo = _suite(tmp_path, UNMARKED)
    done = _run(repo)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    stands = "2 test(s) failed in the parallel run, not marked quiet or flaky: each fails the suite:\n"
    assert stands in out
    unmarked = [
        "tests/test_one.py::test_fails_the_first_time_unmarked",
        "tests/test_one.py::test_its_worker_crashes_the_first_time_unmarked",
    ]
    for test in unmarked:
        assert f"  {test}\n" in out
        assert f"alone:\n  {test}" not in out  # never run again: it would pass alone
    again = "1 test(s) marked quiet or flaky failed in the {} run; each again, alone:\n  tests/test_one.py::{}"
    assert again.format("parallel", "test_flaky_fails_every_time") in out
    assert again.format("quiet", "test_quiet_fails_every_time") in out
    assert _flaky_txt(repo) == []


def test_a_passing_suite_ends_ci_with_an_empty_re_run_list(tmp_path: Path) -> None:
    done = _run(_suite(tmp_path, "def test_passes():\n    pass\n"), ".ci/run")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert done.stdout.rstrip().splitlines()[-1] == "== re-run list: none"


def test_a_flaky_mark_without_a_reason_is_a_collection_error(tmp_path: Path) -> None:
    done = _run(_suite(tmp_path, NO_REASON))
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "@pytest.mark.flaky needs reason='...'" in out
    assert "tests/test_one.py::test_marked_flaky_without_a_reason" in out

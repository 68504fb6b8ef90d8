"""scripts/test.sh's runs on a small suite of its own: a test that fails once, in the parallel run or
in the quiet one, is run again alone and the suite passes; one that fails again fails it (exit 1).

Each failure kind the re-run must take: a parameter id with spaces, brackets, '::' and non-ASCII
characters, a failed setup, a crashed xdist worker, and an id that is not there any more when the
test is run again (pytest's exit 4 for it): none of them may end the suite with a usage error.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CONFTEST = "from failed_list import pytest_runtest_logreport  # noqa: F401\n"
PYTEST_INI = "[pytest]\ntestpaths = tests\naddopts = -p no:cacheprovider\nmarkers =\n    quiet: alone, after\n"
ONCE = """
import os
from pathlib import Path

import pytest

STATE = Path(os.environ["SUITE_STATE"])


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


def test_fails_the_first_time():
    assert not first_time("plain")


@pytest.mark.parametrize("value", ["a b[c]::d \\u00e9"])
def test_an_odd_id_fails_the_first_time(value):
    assert not first_time("odd")


@pytest.fixture
def set_up():
    assert not first_time("setup")


def test_its_setup_fails_the_first_time(set_up):
    pass


def test_its_worker_crashes_the_first_time():
    if first_time("crash"):
        os._exit(3)


GENERATION = STATE / "generation"
GENERATION.touch()


@pytest.mark.parametrize("generation", [GENERATION.read_text() or "one"])
def test_its_id_changes_after_the_first_time(generation):
    GENERATION.write_text("two")
    assert generation == "two"


@pytest.mark.quiet
def test_quiet_fails_the_first_time():
    assert not first_time("quiet")
"""
)
FAILING = (
    ONCE
    + """

def test_passes():
    pass


def test_fails_every_time():
    assert False


@pytest.mark.quiet
def test_quiet_fails_every_time():
    assert False
"""
)


def _suite(tmp_path: Path, tests: str) -> Path:
    """A checkout holding scripts/test.sh, a do-nothing setup, the failed-list hook and `tests`."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "test.sh", repo / "scripts" / "test.sh")
    for script in ("setup.sh", "system-deps.sh"):
        (repo / "scripts" / script).write_text("exit 0\n")
    python = repo / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    (repo / "tests").mkdir()
    shutil.copy(ROOT / "tests" / "support" / "failed_list.py", repo / "tests" / "failed_list.py")
    (repo / "tests" / "conftest.py").write_text(CONFTEST)
    (repo / "tests" / "test_one.py").write_text(textwrap.dedent(tests))
    (repo / "tests" / "test_two.py").write_text("def test_beside():\n    pass\n")
    (repo / "pytest.ini").write_text(PYTEST_INI)
    (tmp_path / "state").mkdir()
    return repo


def _run(repo: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PERFKIT_"))}
    env.update(PERFKIT_TEST_WORKERS="2", SUITE_STATE=str(repo.parent / "state"))
    return subprocess.run(
        ["bash", "scripts/test.sh"], cwd=repo, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_tests_that_fail_once_are_run_again_alone_and_the_suite_passes(tmp_path: Path) -> None:
    done = _run(_suite(tmp_path, FLAKY))
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "5 test(s) failed in the parallel run; each again, alone:" in out
    for listed in (
        "test_one.py::test_fails_the_first_time",
        "test_one.py::test_an_odd_id_fails_the_first_time[a b[c]::d \\xe9]",
        "test_one.py::test_its_setup_fails_the_first_time",
        "test_one.py::test_its_worker_crashes_the_first_time",
        "test_one.py::test_its_id_changes_after_the_first_time[one]",
    ):
        assert f"  tests/{listed}\n" in out
    # the changed id is not found again: the failures are run by test function
    assert "pytest did not find every id again; by test function:" in out
    assert "  tests/test_one.py::test_its_id_changes_after_the_first_time\n" in out
    quiet = "tests/test_one.py::test_quiet_fails_the_first_time"
    assert f"1 test(s) failed in the quiet run; each again, alone:\n  {quiet}\n" in out


def test_tests_that_fail_again_alone_fail_the_suite(tmp_path: Path) -> None:
    done = _run(_suite(tmp_path, FAILING))
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    again = "1 test(s) failed in the {} run; each again, alone:\n  tests/test_one.py::{}"
    assert again.format("parallel", "test_fails_every_time") in out
    assert again.format("quiet", "test_quiet_fails_every_time") in out

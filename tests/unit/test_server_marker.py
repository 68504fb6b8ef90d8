"""The `server` marker is set by the fixtures: a test that requests `tritonserver` (directly or
through a fixture that starts a server) is marked `server`; any other test that starts the real
tritonserver, in pytest or in a child process, fails loudly. So `pytest -m "not server"` starts
no server (tests/conftest.py, tests/_server_guard)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import REAL_TRITONSERVER, ROOT, require

SUITE = """
import subprocess
import sys

import pytest

from perfkit.server import LocalLaunch, launch_local
from tests.conftest import copy_models


def test_starts_one_in_process(tmp_path):
    with launch_local(LocalLaunch(copy_models(tmp_path, ["identity"]))):
        pass


def test_starts_one_in_a_child(tmp_path):
    repo = copy_models(tmp_path, ["identity"])
    subprocess.run([sys.executable, "-m", "perfkit", "serve", "--model-repository", str(repo)], timeout=120)


@pytest.fixture(scope="module")
def module_server(tritonserver, tmp_path_factory):
    yield None


def test_through_a_server_fixture(module_server):
    pass


@pytest.mark.usefixtures("tritonserver")
def test_that_asks_for_the_binary():
    pass


def test_that_needs_nothing():
    pass
"""


def test_the_fixtures_set_the_marker_and_an_unmarked_launch_fails(tmp_path: Path):
    require("tritonserver", REAL_TRITONSERVER, "pip install 'perfkit[server]' (scripts/setup.sh does)")
    (tmp_path / "test_inner.py").write_text(SUITE)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "-p", "tests.conftest",
         "-p", "no:cacheprovider", "-v", "-m", "not server", str(tmp_path / "test_inner.py")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    ran = set(re.findall(r"::(\w+) (?:PASSED|FAILED|ERROR)", out))
    # the two tests that ask for the binary (one through a server fixture) are the ones deselected
    assert ran == {"test_starts_one_in_process", "test_starts_one_in_a_child", "test_that_needs_nothing"}, out
    assert "2 deselected" in out, out
    for name in ("test_starts_one_in_process", "test_starts_one_in_a_child"):
        assert f"::{name} started tritonserver but is not marked `server`" in out, out
    assert re.search(r"pid \d+: \S+/tritonserver --model-repository=", out), out

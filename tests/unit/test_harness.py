"""The test harness's own rules: a missing real component fails under CI=true; waits are on output."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import Lines, require


def test_a_missing_component_skips_locally_and_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="frobnicator is not installed"):
        require("frobnicator", None, "apt-get install frobnicator")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true requires it"):
        require("frobnicator", None, "apt-get install frobnicator")
    require("frobnicator", "/usr/bin/frobnicator", "")  # present: nothing happens


def test_lines_waits_for_a_line_and_fails_when_the_stream_ends_without_it() -> None:
    code = "import sys; print('one'); sys.stdout.flush(); sys.stdin.readline(); print('two')"
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdin is not None
    out = Lines(proc.stdout)
    assert out.wait_for("^one$").group(0) == "one"
    assert "two" not in out.text()  # the child is blocked on stdin until we write
    proc.stdin.write("go\n")
    proc.stdin.close()
    assert out.wait_for("^two$")
    proc.wait(timeout=30)
    with pytest.raises(pytest.fail.Exception, match="no line matching 'three'"):
        out.wait_for("three", timeout_s=30)

"""The test harness's own rules: a missing real component fails under CI=true; waits are on output;
the unit tests' stand-in server answers what it stands in for and nothing else."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from perfkit.errors import ModelLoadError, ModelNotFoundError, ServerError
from perfkit.predict import batch_points
from perfkit.server.base import Server
from tests.conftest import Lines, require, wait_until
from tests.support.stand_in_server import StandInServer


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


def test_a_server_left_running_by_a_test_file_is_found_by_its_tag_and_ended(tmp_path) -> None:
    import shutil

    from tests.support import leftovers

    fake = tmp_path / "tritonserver"  # a process of that name, as /proc shows it; not the real binary
    shutil.copy(shutil.which("sleep") or "/bin/sleep", fake)
    env = {**os.environ, leftovers.TAG: f"{tmp_path}/test_x.py"}
    left = subprocess.Popen([str(fake), "600"], env=env, start_new_session=True)
    stopping = subprocess.Popen([str(fake), "600"], env={**env, leftovers.TAG: "other"}, start_new_session=True)
    try:
        wait_until(lambda: leftovers.tagged_servers("other") == [stopping.pid], "the other server to be seen")
        assert leftovers.tagged_servers(f"{tmp_path}/test_x.py") == [left.pid]
        stopping.terminate()  # told to stop: it is waited for, not reported
        assert leftovers.left_behind("other", timeout_s=30) == []
        assert stopping.wait() == -15
        assert leftovers.left_behind(f"{tmp_path}/test_x.py", timeout_s=0.5) == [left.pid]
        assert left.wait(timeout=10) == -9  # ended with its group
    finally:
        for proc in (left, stopping):
            proc.kill()
            proc.wait()


def test_the_stand_in_server_answers_from_memory_and_refuses_the_rest() -> None:
    server = StandInServer(service_us=lambda n: 1_000.0 + 10.0 * n, refuses=("broken",))
    assert isinstance(server, Server) and server.is_ready() and server.version() == "stand-in"
    before = server.model_stats("m")
    server.executed(4, 10)
    assert [(p.batch_size, p.executions, p.service_us) for p in batch_points(before, server.model_stats("m"), "m")] == [
        (4, 10, 1_040.0)
    ]
    server.load_model("m", config={"max_batch_size": 4})
    assert server.model_config("m") == {"max_batch_size": 4} and server.loads == [("m", {"max_batch_size": 4})]
    with pytest.raises(ModelLoadError):
        server.load_model("broken")
    with pytest.raises(ModelNotFoundError):
        server.model_config("broken")
    # what it does not stand in for fails as an unreachable server does, never reaching a port
    with pytest.raises(ServerError, match="answers no HTTP request"):
        server.repository_index()
    with pytest.raises(ServerError, match="no statistics"):
        StandInServer(keeps_stats=False).model_stats("m")

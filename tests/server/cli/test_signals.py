"""SIGINT and SIGTERM stop long-running commands cleanly, also when started in the background
from a script, where a non-interactive shell starts the job with SIGINT ignored.

Each test runs `sh -c 'perfkit ... & wait'`, waits for the line that shows the command is
under way, signals the perfkit process and checks the cleanup: exit 130, server stopped,
record saved, config restored.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from perfkit.cli import _signals
from perfkit.records import RunRecord
from perfkit.server.local import LocalServer
from tests.conftest import Lines, copy_models, wait_until

_started: list[tuple[subprocess.Popen[str], Lines]] = []


@pytest.fixture(autouse=True)
def _no_leftovers() -> Iterator[None]:
    """A test that fails half-way still leaves no perfkit (and so no tritonserver) running."""
    yield
    while _started:
        proc, out = _started.pop()
        for line in out.lines:
            if line.startswith("pid=") and _alive(int(line[4:])):
                os.kill(int(line[4:]), signal.SIGKILL)  # its tritonserver follows (parent-death signal)
        proc.kill()
        proc.wait(timeout=30)


def _background(args: list[str]) -> tuple[subprocess.Popen[str], Lines]:
    """Run args as a background job of a non-interactive shell; its output and the shell's come on one stream."""
    script = f'{shlex.join(args)} 2>&1 &\necho "pid=$!"\nwait $!\necho "rc=$?"\n'
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    assert proc.stdout is not None
    _started.append((proc, Lines(proc.stdout)))
    return _started[-1]


def _finish(proc: subprocess.Popen[str], out: Lines) -> tuple[int, str]:
    rc = int(out.wait_for(r"^rc=(\d+)$").group(1))
    proc.wait(timeout=60)
    return rc, out.join()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"  # a zombie has exited; only its exit status is left to collect


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def test_a_background_job_starts_with_sigint_ignored() -> None:
    # The premise: without a handler of its own, `kill -INT` would do nothing to such a job.
    probe = [sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGINT) == signal.SIG_IGN)"]
    proc, out = _background(probe)
    out.wait_for(r"^(True|False)$")
    _finish(proc, out)
    assert "True" in out.lines


@pytest.mark.usefixtures("tritonserver")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_serve_in_the_background_stops_its_server_on_a_signal(tmp_path: Path, sig: signal.Signals) -> None:
    repo = copy_models(tmp_path, ["identity"])
    proc, out = _background([sys.executable, "-m", "perfkit", "serve", "--model-repository", str(repo)])
    pid = int(out.wait_for(r"^pid=(\d+)$").group(1))
    host, port = out.wait_for(r"HTTP\s+(\S+):(\d+)$").groups()
    out.wait_for("Press Ctrl-C")
    servers = _children(pid)
    assert servers, "serve should run tritonserver as its child"
    os.kill(pid, sig)
    rc, text = _finish(proc, out)
    assert rc == 130, text
    assert "perfkit: stopping server" in text and "Traceback" not in text
    for server_pid in servers:
        wait_until(lambda p=server_pid: not _alive(p), f"tritonserver {server_pid} to exit")
    with pytest.raises(OSError), socket.create_connection((host, int(port)), timeout=2):
        pass


def test_profile_in_the_background_saves_its_record_on_sigint(triton: LocalServer, tmp_path: Path) -> None:
    rec_path = tmp_path / "interrupted.json"
    args = [sys.executable, "-m", "perfkit", "profile", "-m", "identity", "-u", triton.endpoints.http_url,
            "--concurrency-range", "1:3", "-p", "300", "-r", "20", "--min-windows", "20",
            "-o", str(rec_path)]  # fmt: skip
    proc, out = _background(args)
    pid = int(out.wait_for(r"^pid=(\d+)$").group(1))
    out.wait_for(r"measuring concurrency 2")  # level 1 is done and its record saved
    os.kill(pid, signal.SIGINT)
    rc, text = _finish(proc, out)
    assert rc == 130, text
    record = RunRecord.load(rec_path)
    assert record.status == "interrupted" and [lv.load.value for lv in record.levels] == [1]


@pytest.mark.usefixtures("tritonserver")
@pytest.mark.slow
def test_tune_in_the_background_restores_the_config_on_sigterm(model_repo: Path, tmp_path: Path) -> None:
    cfg_path = model_repo / "batcher" / "config.pbtxt"
    original = cfg_path.read_bytes()
    args = [sys.executable, "-m", "perfkit", "tune", "-m", "batcher", "--model-repository", str(model_repo),
            "-o", str(tmp_path / "out"), "--latency-budget", "20ms", "--load", "concurrency", "--max-concurrency", "4",
            "--measurement-interval", "300", "--max-batch-sizes", "8", "--no-dynamic-batching",
            "--instance-counts", "1,2", "--precisions", "fp32", "--trials", "3", "--search", "measure"]  # fmt: skip
    _signal_while_swapped(args, cfg_path, original, r"^trial 1/", signal.SIGTERM)


def test_handlers_turn_an_ignored_sigint_into_one_interrupt_and_are_put_back() -> None:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a background job inherits it
    try:
        cleaned_up = False
        with pytest.raises(KeyboardInterrupt), _signals.handled():
            try:
                os.kill(os.getpid(), signal.SIGINT)
                signal.pause()  # not reached when the handler raises (the signal is already delivered)
            finally:
                os.kill(os.getpid(), signal.SIGTERM)  # a second signal during cleanup does not cut it short
                cleaned_up = True
        assert cleaned_up
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("tritonserver")
@pytest.mark.slow
def test_gate_ab_in_the_background_restores_the_config_on_sigint(tmp_path: Path) -> None:
    repo = copy_models(tmp_path, ["sleeper"])
    cfg_path = repo / "sleeper" / "config.pbtxt"
    original = cfg_path.read_bytes()
    candidate = tmp_path / "candidate.pbtxt"
    candidate.write_bytes(original + b"\n# the candidate\n")
    args = [sys.executable, "-m", "perfkit", "gate", "--ab", "-m", "sleeper", "--model-repository", str(repo),
            "--baseline-config", str(cfg_path), "--candidate-config", str(candidate), "--rounds", "3",
            "--concurrency", "1", "--measurement-interval", "300", "--max-trials", "20",
            "--min-windows", "20"]  # fmt: skip
    _signal_while_swapped(args, cfg_path, original, r"round \d+: candidate", signal.SIGINT)


def _signal_while_swapped(args: list[str], cfg_path: Path, original: bytes, line: str, sig: int) -> None:
    """Start a perfkit command in the background, signal it once it printed `line` and its
    candidate config is in place; it exits 130 with the user's config byte for byte."""
    proc, out = _background(args)
    pid = int(out.wait_for(r"^pid=(\d+)$").group(1))
    out.wait_for(line)
    wait_until(lambda: cfg_path.read_bytes() != original, "a candidate config to be in place")
    os.kill(pid, sig)
    rc, text = _finish(proc, out)
    assert rc == 130, text
    assert cfg_path.read_bytes() == original, text


@pytest.mark.usefixtures("tritonserver")
@pytest.mark.slow
def test_run_in_the_background_stops_its_server_and_keeps_the_record_on_sigterm(tmp_path: Path) -> None:
    repo = copy_models(tmp_path, ["sleeper"])
    sweep = tmp_path / "long.toml"
    sweep.write_text(
        f'name = "long"\n[server]\nmodel_repository = "{repo}"\n'
        "[load]\nlevels = [1, 2]\nmeasurement_interval_ms = 300\nmax_trials = 40\nmin_windows = 40\n"
        '[[models]]\nname = "sleeper"\n[output]\ndir = "out"\nstore = false\nreport = false\n'
    )
    proc, out = _background([sys.executable, "-m", "perfkit", "run", str(sweep)])
    pid = int(out.wait_for(r"^pid=(\d+)$").group(1))
    out.wait_for(r"profiling sleeper")
    servers = _children(pid)
    record = tmp_path / "out" / "sleeper.json"
    wait_until(record.is_file, "the first level's record")  # saved after each level
    os.kill(pid, signal.SIGTERM)
    rc, text = _finish(proc, out)
    assert rc == 130, text
    assert RunRecord.load(record).status == "interrupted"
    for server_pid in servers:
        wait_until(lambda p=server_pid: not _alive(p), f"tritonserver {server_pid} to exit")

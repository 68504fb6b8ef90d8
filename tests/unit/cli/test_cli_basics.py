"""CLI shell: help, version, error mapping to exit codes and one-line messages."""

from __future__ import annotations

import subprocess
import sys

from perfkit import __version__
from perfkit.cli import main


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "perfkit", *args], capture_output=True, text=True, timeout=120)


def test_help_lists_every_command_group():
    out = _run("--help")
    assert out.returncode == 0
    for name in ("profile", "tune", "report", "gate", "serve", "baseline", "run"):
        assert f"\n  {name}" in out.stdout
    assert "Exit codes" in out.stdout


def test_version():
    out = _run("--version")
    assert out.returncode == 0 and __version__ in out.stdout


def test_every_command_has_real_help():
    for name in ("serve", "profile", "tune", "report", "gate", "baseline", "run"):
        out = _run(name, "--help")
        assert out.returncode == 0, (name, out.stderr)
        assert "Not available" not in out.stdout, name
        assert len(out.stdout.splitlines()) > 5, name


def test_missing_repository_one_line_error_exit_3(tmp_path, capsys):
    rc = main(["serve", "--model-repository", str(tmp_path / "missing")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 3
    assert err[-1].startswith("perfkit: error: model repository") and "missing" in err[-1]
    assert not any("Traceback" in line for line in err)


def test_no_binary_exit_4(tmp_path, capsys):
    (tmp_path / "repo").mkdir()
    rc = main(["serve", "--model-repository", str(tmp_path / "repo"), "--tritonserver", str(tmp_path / "nope")])
    assert rc == 4
    assert "no executable file" in capsys.readouterr().err


def test_usage_error_exit_2(capsys):
    assert main(["serve", "--launch-mode", "bogus"]) == 2


def test_port_in_use_exit_4_one_line(tmp_path, capsys):
    import socket

    (tmp_path / "repo").mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        rc = main(["serve", "--model-repository", str(tmp_path / "repo"), "--http-port", str(port)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 4
    assert err[-1].startswith(f"perfkit: error: HTTP port {port} on 127.0.0.1 is already in use")

"""`perfkit profile --ray` input checks that need neither Ray nor a server."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfkit.cli import main
from perfkit.errors import ExitCode


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    rc = main(["profile", "-m", "identity", *args])
    out = capsys.readouterr()
    return rc, out.out + out.err


def test_a_fleet_without_ray_is_a_usage_error(capsys):
    rc, out = _run(["-u", "a:8000,b:8000"], capsys)
    assert rc == ExitCode.USAGE
    assert "need --ray" in out


def test_client_hosts_without_ray_is_a_usage_error(capsys):
    rc, out = _run(["-u", "a:8000", "--client-hosts", "2"], capsys)
    assert rc == ExitCode.USAGE
    assert "--ray" in out


def test_a_missing_url_file_names_the_file(tmp_path: Path, capsys):
    missing = tmp_path / "nope.txt"
    rc, out = _run(["-u", f"@{missing}", "--ray", "auto"], capsys)
    assert rc == ExitCode.INPUT
    assert str(missing) in out and "cannot read" in out


def test_an_empty_url_file_is_an_input_error(tmp_path: Path, capsys):
    empty = tmp_path / "fleet.txt"
    empty.write_text("# nothing yet\n\n")
    rc, out = _run(["-u", f"@{empty}", "--ray", "auto"], capsys)
    assert rc == ExitCode.INPUT
    assert "lists no server URL" in out

"""Refuses to start the real tritonserver in a test that is not marked `server`.

tests/conftest.py loads this module in pytest itself and, for every test without the marker,
sets PERFKIT_TEST_NO_TRITONSERVER (the binary's path) and PERFKIT_TEST_GUARD_LOG and puts this
folder first on PYTHONPATH, so Python loads it at startup in every child the test runs too (the
CLI as a subprocess, a script). Starting that binary then raises, and the command is written to
the log, which the harness reads after the test: a launch is reported even where the code under
test catches the error. With the variable unset (a `server` test, or no test at all) nothing changes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

FORBIDDEN_ENV = "PERFKIT_TEST_NO_TRITONSERVER"
LOG_ENV = "PERFKIT_TEST_GUARD_LOG"


def _program(args: Any, kwargs: dict[str, Any]) -> str | None:
    """The program a Popen call would run (its executable, or the first word of its command)."""
    if kwargs.get("executable"):
        return os.fsdecode(kwargs["executable"])
    if isinstance(args, (str, bytes, os.PathLike)):
        words = os.fsdecode(args).split() if kwargs.get("shell") else [os.fsdecode(args)]
        return words[0] if words else None
    try:
        return os.fsdecode(args[0])
    except (IndexError, TypeError, KeyError):
        return None


def is_forbidden(program: str | None, forbidden: str) -> bool:
    """Whether program is the real tritonserver (the same file, however it is named)."""
    if not program:
        return False
    found = program if os.sep in program else shutil.which(program)
    return found is not None and os.path.realpath(found) == os.path.realpath(forbidden)


def install() -> None:
    """Wrap subprocess.Popen (once per process) so that a launch of the forbidden binary raises."""
    if getattr(subprocess.Popen, "_perfkit_server_guard", False):
        return
    original = subprocess.Popen.__init__

    def guarded_init(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        forbidden = os.environ.get(FORBIDDEN_ENV)
        if forbidden and is_forbidden(_program(args, kwargs), forbidden):
            command = " ".join(map(os.fsdecode, args)) if isinstance(args, (list, tuple)) else str(args)
            log = os.environ.get(LOG_ENV)
            if log:
                with open(log, "a", encoding="utf-8") as f:
                    f.write(f"pid {os.getpid()}: {command}\n")
            raise RuntimeError(
                "this test is not marked `server` and must not start tritonserver: request the "
                "`tritonserver` fixture (tests/conftest.py), directly or through a fixture that starts a server"
            )
        original(self, args, *rest, **kwargs)

    subprocess.Popen.__init__ = guarded_init  # type: ignore[method-assign]  # the guard wraps every launch
    subprocess.Popen._perfkit_server_guard = True  # type: ignore[attr-defined]  # installed once per process


install()

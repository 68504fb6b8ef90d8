"""Servers a test file leaves behind.

tests/conftest.py names the running test's file in the environment (TAG) before each test, so every
tritonserver a test starts -- through the launcher, or as the child of a CLI the test runs -- carries
it. Once a file's last test is torn down (its module fixtures with it), no server with its name may
be left: a server still running then would load the machine under the tests after it (the quiet
ones) and under the perf gate CI runs last.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

TAG = "PERFKIT_TEST_FILE"
# The tag of the servers this process's session-scoped fixtures start: one per pytest process, since
# each xdist worker has its own session servers and checks for leftovers when its own last test
# ends, while the other workers' session servers still serve their tests.
SESSION = f"session-{os.getpid()}"


def tagged_servers(value: str) -> list[int]:
    """The tritonserver processes whose environment holds TAG=value."""
    mark = f"{TAG}={value}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() != "tritonserver":
                continue
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if mark in environ:
            pids.append(int(entry.name))
    return pids


def left_behind(value: str, timeout_s: float = 60.0) -> list[int]:
    """The servers tagged value still running after timeout_s (a server told to stop may take a
    while: tritonserver lets in-flight requests finish and unloads its models first). Those left are
    killed, with their process groups (the launcher starts a server as its group's leader)."""
    deadline = time.monotonic() + timeout_s
    pids = tagged_servers(value)
    while pids and time.monotonic() < deadline:
        time.sleep(0.2)  # a process ending has no event to wait on from here
        pids = tagged_servers(value)
    for pid in pids:
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except OSError:
                pass
    return pids

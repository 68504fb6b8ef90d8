"""Keep the load generators off the server's CPUs (--server-cpus): the server's process tree (every
thread, and the python backend's stubs it starts later, which inherit its threads' affinity) on the
CPUs given, this process (its tuner, its load generator's threads, and the perf_analyzer processes
it starts) on the others. On a machine whose few CPUs the server shares with its clients, a client
that costs more CPU a request takes more from the server: perf_analyzer 2.60.0 spends about twice
perfkit's CPU a request (76 against 36 us on onnx_mlp, benchmarks/onnx_client_share.py), so the two
would measure two different servers. Apart, both measure the same one, as on a deployment whose
clients run on other machines."""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def parse_cpus(text: str) -> frozenset[int]:
    """'0' or '0,1' or '0-3' -> the CPU numbers, at least one left to the clients (of those this
    process may use); argparse.ArgumentTypeError naming the text otherwise."""
    cpus: set[int] = set()
    for part in (p.strip() for p in text.split(",") if p.strip()):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise argparse.ArgumentTypeError(f"{text!r}: give CPU numbers, e.g. 0 or 0-1 or 0,2")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    every = os.sched_getaffinity(0)
    if not cpus or not cpus <= every or not every - cpus:
        raise argparse.ArgumentTypeError(
            f"{text!r}: of CPUs {sorted(every)}, give the server some and leave the clients some"
        )
    return frozenset(cpus)


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the process ended while we looked
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _pin(pid: int, cpus: frozenset[int]) -> None:
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            os.sched_setaffinity(int(task.name), cpus)
        except (ProcessLookupError, FileNotFoundError):
            pass  # the thread ended while we looked


def pin_tree(pid: int, cpus: frozenset[int]) -> None:
    """Pin a process, every thread of it, and its descendants (and theirs) to cpus."""
    todo = [pid]
    while todo:
        one = todo.pop()
        _pin(one, cpus)
        todo.extend(_children(one))


def pin_apart(server_pid: int, server_cpus: frozenset[int]) -> frozenset[int]:
    """Pin the server's process tree to server_cpus and this process to the other CPUs it may use
    (parse_cpus checked that some are left); returns those."""
    rest = frozenset(os.sched_getaffinity(0)) - server_cpus
    pin_tree(server_pid, server_cpus)
    _pin(os.getpid(), rest)
    return rest

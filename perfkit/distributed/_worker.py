"""A load worker: perfkit's own Engine(s) on one node, digesting its samples where they are made.

This class knows nothing of Ray (the coordinator wraps it with ``ray.remote``), so it can be
driven in-process too. Every time it is given or returns is on its own monotonic clock: the
coordinator translates its level start and window boundaries by the measured clock offset.
A worker hosts one engine per server it sends to (a "unit"); units share the level's schedule
exactly by their global index among all units of the run.
"""

from __future__ import annotations

import logging
import os
import resource
import socket
import time
from dataclasses import dataclass
from time import perf_counter_ns

from perfkit.distributed._digest import LevelDigest, WindowDigest, level_digest, window_digest
from perfkit.loadgen import EngineConfig, make_engine, sleep_until
from perfkit.recorder import LevelRecorder
from perfkit.records import LoadLevel

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Unit:
    """One engine of a worker: the server it sends to, and its place in the run's split."""

    server: int  # index into the run's server list
    cfg: EngineConfig
    index: int  # global index among all units of the run
    count: int  # number of units in the run
    worker: int = 0  # the worker that hosts it


@dataclass(frozen=True)
class LevelPlan:
    """One level, in the worker's clock: when to start, where windows begin, how long they are."""

    level: LoadLevel
    t0_ns: int
    measure_from_ns: int
    window_ns: int
    batch_size: int
    shares: tuple[int, ...]  # closed loop: concurrency of each unit (0: idle this level)
    # open loop: each unit's (index, count) in this level's split of the due times; empty: the
    # units' own. After a worker is lost, the survivors re-split the whole rate among themselves.
    slots: tuple[tuple[int, int], ...] = ()


class LoadWorker:
    """Runs a worker's engines level by level and answers with digests, never raw samples."""

    def __init__(self, worker: int, units: list[Unit]) -> None:
        self.worker = worker
        self.units = units
        self._engines = [make_engine(u.cfg) for u in units]
        self._recorders: list[LevelRecorder] = []
        self._active: list[bool] = [False] * len(units)
        self._plan: LevelPlan | None = None
        self._cpu_at_start_s = 0.0

    def identity(self) -> dict[str, object]:
        """Where this worker runs: host name, process id, Ray node id (when under Ray)."""
        node = ""
        try:
            import ray

            node = ray.get_runtime_context().get_node_id()
        except Exception:  # not under Ray: in-process use
            node = ""
        return {"host": socket.gethostname(), "pid": os.getpid(), "node_id": node}

    def clock_ns(self) -> int:
        """This worker's monotonic clock (the one its engines stamp samples with)."""
        return perf_counter_ns()

    def start(self, plan: LevelPlan) -> None:
        """Start the level on every unit with a share; closed loops wait for the common start time."""
        self._plan = plan
        self._cpu_at_start_s = time.process_time()
        closed = plan.level.mode == "concurrency"
        self._recorders = [
            LevelRecorder(
                start_ns=plan.measure_from_ns, window_ns=plan.window_ns, closed_loop=closed, batch_size=plan.batch_size
            )
            for _ in self.units
        ]
        if closed:
            # Connections open at start(); wait so that every worker's first sends go out together.
            sleep_until(plan.t0_ns)
        for i, (unit, engine) in enumerate(zip(self.units, self._engines)):
            share = plan.shares[i] if closed else 0
            self._active[i] = share > 0 or not closed
            if self._active[i]:
                index, count = plan.slots[i] if plan.slots else (unit.index, unit.count)
                engine.start(plan.level, plan.t0_ns, share, index, count)

    def window(self, k: int) -> list[WindowDigest]:
        """Digests of window k of every unit, once window k has ended on this worker's clock."""
        assert self._plan is not None, "window() before start()"
        sleep_until(self._plan.measure_from_ns + k * self._plan.window_ns)
        out = []
        for i, engine in enumerate(self._engines):
            if self._active[i]:
                self._recorders[i].add(engine.drain())
            out.append(window_digest(self._recorders[i], k))
        return out

    def finish(self, windows: int, drain_timeout_s: float) -> list[LevelDigest]:
        """Stop sending, collect the stragglers (bounded), and digest the level of every unit."""
        assert self._plan is not None, "finish() before start()"
        end_ns = self._plan.measure_from_ns + windows * self._plan.window_ns
        out = []
        for i, engine in enumerate(self._engines):
            if self._active[i]:
                self._recorders[i].add(engine.stop(drain_timeout_s))
                self._active[i] = False
            out.append(level_digest(self._recorders[i], end_ns))
        self._recorders = []
        return out

    def usage(self) -> tuple[float, int]:
        """CPU seconds this process used since the level's start, and its peak resident memory (bytes)."""
        return time.process_time() - self._cpu_at_start_s, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def close(self) -> None:
        """Release every engine (connections, threads)."""
        for engine in self._engines:
            engine.close()

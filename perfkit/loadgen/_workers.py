"""Worker processes, each running an Engine, driven over a pipe; results merge exactly.

Sample timestamps come from CLOCK_MONOTONIC, which all processes of the machine share,
so concatenating the workers' samples gives exactly what one process would have recorded.
"""

from __future__ import annotations

import multiprocessing as mp
from multiprocessing.connection import Connection
from typing import Any

from perfkit.errors import MeasurementError
from perfkit.loadgen._engine import EngineConfig
from perfkit.loadgen._native_engine import make_engine
from perfkit.records import LoadLevel, Samples


def _worker_main(cfg: EngineConfig, conn: Connection) -> None:
    engine = make_engine(cfg)
    conn.send(("ok", None))  # ready: a level's schedule must not start before its workers can send
    try:
        while True:
            cmd, args = conn.recv()
            if cmd == "start":
                engine.start(*args)
                conn.send(("ok", None))
            elif cmd == "drain":
                conn.send(("ok", engine.drain()))
            elif cmd == "stop":
                conn.send(("ok", engine.stop(*args)))
            elif cmd == "close":
                break
    except (EOFError, KeyboardInterrupt):
        pass
    except Exception as err:  # report, don't hang the parent
        try:
            conn.send(("error", repr(err)))
        except OSError:
            pass
    finally:
        engine.close()


class ProcessEngine:
    """Same interface as Engine, running in a child process."""

    def __init__(self, cfg: EngineConfig) -> None:
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_worker_main, args=(cfg, child), daemon=True, name="perfkit-worker")
        self._proc.start()
        child.close()
        self._ready = False

    def wait_ready(self) -> None:
        """Wait until the worker process has started its engine (a spawned interpreter takes a
        second or so to import); raises MeasurementError if it failed."""
        if not self._ready:
            self.wait_ok()
            self._ready = True

    def _ask(self, cmd: str, *args: Any) -> Any:
        self.wait_ready()
        self._conn.send((cmd, args))
        status, value = self._conn.recv()
        if status != "ok":
            raise MeasurementError(f"load-generator worker failed: {value}")
        return value

    def send_start(self, level: LoadLevel, t0_ns: int, share: float, worker: int, workers: int) -> None:
        self.wait_ready()
        self._conn.send(("start", (level, t0_ns, share, worker, workers)))

    def wait_ok(self) -> Any:
        status, value = self._conn.recv()
        if status != "ok":
            raise MeasurementError(f"load-generator worker failed: {value}")
        return value

    def start(self, level: LoadLevel, t0_ns: int, share: float, worker: int = 0, workers: int = 1) -> None:
        self.send_start(level, t0_ns, share, worker, workers)
        self.wait_ok()

    def drain(self) -> Samples:
        return self._ask("drain")  # type: ignore[no-any-return]  # _ask returns the worker's unpickled reply (Any); drain and stop reply with Samples

    def stop(self, drain_timeout_s: float) -> Samples:
        return self._ask("stop", drain_timeout_s)  # type: ignore[no-any-return]  # _ask returns the worker's unpickled reply (Any); drain and stop reply with Samples

    def close(self) -> None:
        try:
            self._conn.send(("close", ()))
        except OSError:
            pass
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5)

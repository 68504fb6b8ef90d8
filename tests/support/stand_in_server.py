"""One stand-in for a Triton server, for unit tests that run a stage without a real one.

StandInServer is a perfkit.server.base.Server that answers from memory: where it listens, its
version, readiness (`ready`), its log (`log_lines`), per-batch-size execution statistics that grow
by what the test says was executed (`executed`), and model loads it records (`loads`) or refuses
(`refuses`). Anything else of the admin API fails as an unreachable server does (ServerError), so a
test that reaches for more than the stand-in gives is told at once, not sent to a real port.

StandInRoute is the tune's config route to go with it: it serves whatever it is told, recording each
config text, and guards nothing (the stand-in server holds no repository to put back).

A test whose stand-in must behave in a way of its own (statistics on a fake timeline, say) keeps it
as a small subclass in the test file.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from perfkit.errors import ModelLoadError, ModelNotFoundError, ServerError
from perfkit.server.base import Endpoints, Server


class StandInServer(Server):
    """A server the test drives by hand.

    keeps_stats: False for a server that keeps no statistics (model_stats raises ServerError, as
    Triton's answer does when it fails). service_us: how long one execution of a batch of n takes,
    in microseconds (a constant, or a function of n), for the statistics `executed` adds.
    refuses: models whose load fails with ModelLoadError.
    """

    mode = "external"

    def __init__(
        self,
        *,
        keeps_stats: bool = True,
        service_us: float | Callable[[int], float] = 0.0,
        refuses: Collection[str] = (),
        endpoints: Endpoints | None = None,
        version: str = "stand-in",
    ) -> None:
        super().__init__(endpoints or Endpoints("localhost", 8000, None, None))
        self.keeps_stats = keeps_stats
        self.service_us = service_us
        self.refuses = set(refuses)
        self._version = version
        self.ready = True
        self.log_lines: list[str] = []
        self.loads: list[tuple[str, dict[str, Any] | None]] = []  # (model, config given) of each load asked
        self.unloads: list[str] = []
        self.configs: dict[str, dict[str, Any]] = {}  # the config each model was last loaded with
        self._batches: dict[int, list[float]] = {}  # batch size -> [executions, ns]

    # -- what the test drives -----------------------------------------------------------------------
    def executed(self, batch: int, executions: int) -> None:
        """Count `executions` executions of a batch of `batch` in the statistics."""
        us = self.service_us(batch) if callable(self.service_us) else self.service_us
        row = self._batches.setdefault(batch, [0, 0.0])
        row[0] += executions
        row[1] += executions * us * 1e3

    # -- the Server protocol ------------------------------------------------------------------------
    def _request(
        self, method: str, path: str, body: dict[str, Any] | None = None, timeout_s: float | None = None
    ) -> tuple[int, dict[str, Any]]:
        raise ServerError(f"the stand-in server answers no HTTP request ({method} {path})")

    def version(self) -> str:
        return self._version

    def is_ready(self) -> bool:
        return self.ready

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log_lines[-lines:])

    def model_stats(self, name: str = "") -> dict[str, Any]:
        """The statistics answer with a row per batch size executed (its time all compute_infer)."""
        if not self.keeps_stats:
            raise ServerError("no statistics from a stand-in server")
        rows = []
        for batch, (n, ns) in sorted(self._batches.items()):
            phases = {"compute_input": 0, "compute_infer": int(ns), "compute_output": 0}
            rows.append({"batch_size": batch, **{k: {"count": int(n), "ns": v} for k, v in phases.items()}})
        return {"model_stats": [{"name": name, "batch_stats": rows}]}

    def load_model(self, name: str, *, config: dict[str, Any] | None = None) -> None:
        self.loads.append((name, config))
        if name in self.refuses:
            raise ModelLoadError(f"model {name!r} failed to load: refused by the stand-in server")
        if config is not None:
            self.configs[name] = config

    def unload_model(self, name: str) -> None:
        self.unloads.append(name)

    def model_config(self, name: str) -> dict[str, Any]:
        if name not in self.configs:
            raise ModelNotFoundError(f"model {name!r} was not loaded with a config on the stand-in server")
        return self.configs[name]


class StandInRoute:
    """A tune's config route onto a stand-in server: serves whatever it is told, recording each
    config text in `served` (and handing it to on_serve), and guards nothing."""

    name = "stand-in"

    def __init__(self, on_serve: Callable[[str], object] | None = None) -> None:
        self.served: list[str] = []
        self.on_serve = on_serve

    def serve(self, server: Server, model: str, config_path: Path, text: str) -> None:
        self.served.append(text)
        if self.on_serve is not None:
            self.on_serve(text)

    def guard(
        self, server: Server, paths: Mapping[str, Path], *, reload_last: Sequence[str] = ()
    ) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def restore_hint(self, server: Server, models: Sequence[str]) -> str:
        return ""

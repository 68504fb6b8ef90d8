"""Synthetic run records with known noise: for the gate's tests and its noise study.

Real records come from perfkit.measure; these have the same shape and a controlled
truth (a service time, a throughput, a per-window noise), so a gate's behaviour can
be checked against what it should decide.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from hdrh.histogram import HdrHistogram

from perfkit.recorder import HIST_DIGITS, HIST_HIGHEST_US, HIST_LOWEST_US
from perfkit.records import (
    LatencySummary,
    LevelResult,
    LoadLevel,
    Machine,
    ModelInfo,
    Precision,
    ProfileSpec,
    RunRecord,
    ServerInfo,
    Window,
)

# The shape of a synthetic latency distribution: quantile -> multiple of the median.
_SHAPE_Q = (0.0, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0)
_SHAPE_X = (0.8, 1.0, 1.2, 1.25, 1.3, 1.5, 2.0)
MACHINE = Machine(hostname="ci-runner", cpu_model="Synthetic CPU", cpu_count=2, gpus=())


def synthetic_level(
    *,
    concurrency: float = 1,
    latency_ms: float = 10.0,
    noise: float = 0.02,
    windows: int = 6,
    window_s: float = 1.0,
    seed: int = 0,
    batch_size: int = 1,
    errors: int = 0,
    late: int = 0,
    dropped: int = 0,
    open_loop: bool = False,
    count: int | None = None,
    thin: Sequence[str] = (),
    offset: float = 1.0,
) -> LevelResult:
    """One level of a closed loop at `concurrency` (or a request rate when open_loop) whose service
    time is latency_ms * offset with per-window relative noise `noise` (seeded)."""
    rng = np.random.default_rng(seed)
    lat_us = latency_ms * 1000.0 * offset
    wins = []
    for i in range(windows):
        f = max(0.05, 1.0 + rng.normal(0.0, noise))
        p50 = lat_us * f
        rate = (concurrency / (p50 / 1e6)) if not open_loop else concurrency
        done = int(rate * window_s)
        wins.append(
            Window(
                i * window_s, window_s, done, done * batch_size, 0, rate * batch_size, p50, p50 * 1.3, p50,
                p90_us=p50 * 1.2, p95_us=p50 * 1.25, p999_us=p50 * 1.5,
            )
        )  # fmt: skip
    p50s = np.array([w.p50_us for w in wins])
    completed = sum(w.completed for w in wins)
    tput = float(np.mean([w.infer_per_s for w in wins]))
    n = completed if count is None else count

    def summary(kind: Any) -> LatencySummary:
        m = float(p50s.mean())
        # A real histogram whose percentiles are about the figures below, so runs can be pooled.
        # (n requests in at most 200 distinct values: cheap to build, same percentiles.)
        k = max(1, min(n, 200))
        values = np.interp((np.arange(k) + 0.5) / k, _SHAPE_Q, _SHAPE_X) * m
        hist = HdrHistogram(HIST_LOWEST_US, HIST_HIGHEST_US, HIST_DIGITS)
        for value, share in zip(values, np.diff(np.linspace(0, n, k + 1).round()).astype(int)):
            if share:
                hist.record_value(int(round(value)), int(share))
        hist = hist.encode()
        return LatencySummary(
            kind, n, m * 0.8, m * 2, m, m * noise, m, m * 1.2, m * 1.25, m * 1.3, m * 1.5, hist.decode(), tuple(thin)
        )

    load = LoadLevel("request_rate", concurrency, "poisson") if open_loop else LoadLevel("concurrency", concurrency)
    return LevelResult(
        load=load,
        batch_size=batch_size,
        stable=True,
        precision=Precision(noise, noise),
        duration_s=windows * window_s,
        request_count=completed,
        inference_count=completed * batch_size,
        throughput_infer_per_s=tput,
        sent_rps=tput / batch_size,
        completed_rps=tput / batch_size,
        error_count=errors,
        errors={"connection reset": errors} if errors else {},
        late_count=late,
        dropped_count=dropped,
        send_lateness_p99_us=None,
        service=summary("service"),
        corrected=summary("corrected") if open_loop else None,
        windows=tuple(wins),
    )


def synthetic_record(
    levels: Sequence[LevelResult] | None = None,
    *,
    model: str = "sleeper",
    config: dict[str, Any] | None = None,
    server_version: str = "2.51.0",
    machine: Machine | None = None,
    protocol: Literal["http", "grpc"] = "http",
    status: Any = "ok",
    **level_kwargs: Any,
) -> RunRecord:
    """A whole run record; levels default to concurrency 1 and 4 built with level_kwargs."""
    if levels is None:
        seed = int(level_kwargs.pop("seed", 0))
        levels = [synthetic_level(concurrency=c, seed=seed + i, **level_kwargs) for i, c in enumerate((1, 4))]
    config = config if config is not None else {"name": model, "max_batch_size": 8}
    import hashlib  # noqa: PLC0415
    import json  # noqa: PLC0415

    sha = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()
    return RunRecord(
        perfkit_version="0.0.0",
        created_utc="2025-01-01T00:00:00Z",
        command=("perfkit", "profile"),
        machine=machine if machine is not None else MACHINE,
        server=ServerInfo(version=server_version, protocol=protocol),
        model=ModelInfo(name=model, version="1", config=config, served_config_sha256=sha),
        spec=ProfileSpec(
            model=model,
            levels=tuple(lv.load for lv in levels),
            protocol=protocol,
            batch_size=levels[0].batch_size if levels else 1,
        ),
        levels=tuple(levels),
        status=status,
    )

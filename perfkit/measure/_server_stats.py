"""Triton's model statistics: snapshots and their deltas over a level or a window."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from perfkit.records import ServerStats

_PHASES = ("queue", "compute_input", "compute_infer", "compute_output", "success", "fail", "cache_hit", "cache_miss")


def _flatten(stats: dict[str, Any], model: str) -> dict[str, Any]:
    """Pick one model's counters out of a /v2/models/M/stats answer (all versions summed)."""
    out: dict[str, Any] = {"execution_count": 0, "inference_count": 0, "batch": {}}
    for phase in _PHASES:
        out[phase] = [0, 0]
    for entry in stats.get("model_stats", []):
        if entry.get("name") != model:
            continue
        inf = entry.get("inference_stats", {})
        for phase in _PHASES:
            out[phase][0] += int(inf.get(phase, {}).get("count", 0))
            out[phase][1] += int(inf.get(phase, {}).get("ns", 0))
        out["execution_count"] += int(entry.get("execution_count", 0))
        out["inference_count"] += int(entry.get("inference_count", 0))
        for b in entry.get("batch_stats", []) or []:
            size = str(b.get("batch_size"))
            out["batch"][size] = out["batch"].get(size, 0) + int(b.get("compute_infer", {}).get("count", 0))
    return out


def snapshot(get_stats: Any, models: list[str]) -> dict[str, dict[str, Any]]:
    """Counters of each model now; get_stats(name) returns the server's stats JSON."""
    return {m: _flatten(get_stats(m), m) for m in models}


def settled(
    get_stats: Any,
    models: list[str],
    before: dict[str, dict[str, Any]],
    answered: int,
    pause_s: float = 2.0,
    cap_s: float = 30.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, dict[str, Any]]:
    """Counters after a level whose load has stopped: read again until the first model's successes
    since `before` reach `answered` (the successful responses the client has to requests sent after
    `before` was read), while the count still grows: it gives up after pause_s with no change, or
    after cap_s in all.

    Triton counts a request after it has sent its response (python_backend: ProcessRequests in
    src/python_be.cc sends each with InferResponse::Send; its PbMetricReporter reports the requests'
    statistics in its destructor, src/pb_metric_reporter.cc, as ProcessRequests returns; the other
    backends send, then call TRITONBACKEND_ModelInstanceReportStatistics), so a read right after the
    last response can miss the last requests, and a loaded server (a container's, a busy machine's)
    can count them seconds later: a count that still moves is waited for, one that stopped is not.
    A server that counted none of them keeps no statistics: it is not waited for.
    """
    start_s = last_change_s = clock()
    model = models[0]
    last = None
    while True:
        after = snapshot(get_stats, models)
        counted = after[model]["success"][0] - before[model]["success"][0]
        if counted >= answered or counted <= 0:
            return after
        now_s = clock()
        if counted != last:
            last, last_change_s = counted, now_s
        if now_s - last_change_s >= pause_s or now_s - start_s >= cap_s:
            return after
        sleep(0.005)


def _avg_us(before: list[int], after: list[int], per: int) -> float:
    return (after[1] - before[1]) / 1e3 / per if per > 0 else 0.0


def delta(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]], model: str) -> ServerStats:
    """Statistics of `model` between two snapshots, with its composing models (ensembles)."""

    def one(name: str, composing: tuple[ServerStats, ...] = ()) -> ServerStats:
        b, a = before[name], after[name]
        requests = a["success"][0] - b["success"][0]
        executions = a["execution_count"] - b["execution_count"]
        batches = {
            size: a["batch"].get(size, 0) - b["batch"].get(size, 0)
            for size in a["batch"]
            if a["batch"].get(size, 0) - b["batch"].get(size, 0) > 0
        }
        return ServerStats(
            model=name,
            request_count=requests,
            execution_count=executions,
            inference_count=a["inference_count"] - b["inference_count"],
            queue_avg_us=_avg_us(b["queue"], a["queue"], requests),
            compute_input_avg_us=_avg_us(b["compute_input"], a["compute_input"], requests),
            compute_infer_avg_us=_avg_us(b["compute_infer"], a["compute_infer"], requests),
            compute_output_avg_us=_avg_us(b["compute_output"], a["compute_output"], requests),
            request_avg_us=_avg_us(b["success"], a["success"], requests),
            batch_sizes=dict(sorted(batches.items(), key=lambda kv: int(kv[0]))),
            failures=a["fail"][0] - b["fail"][0],
            composing=composing,
            cache_hit_count=a["cache_hit"][0] - b["cache_hit"][0],
            cache_hit_avg_us=_avg_us(b["cache_hit"], a["cache_hit"], a["cache_hit"][0] - b["cache_hit"][0]),
            cache_miss_count=a["cache_miss"][0] - b["cache_miss"][0],
            cache_miss_avg_us=_avg_us(b["cache_miss"], a["cache_miss"], a["cache_miss"][0] - b["cache_miss"][0]),
        )

    composing = tuple(one(name) for name in before if name != model)
    return one(model, composing)


def composing_models(config: dict[str, Any]) -> list[str]:
    """Models an ensemble's steps call (empty for a plain model)."""
    steps = (config.get("ensemble_scheduling") or {}).get("step", [])
    names: list[str] = []
    for step in steps:
        name = step.get("model_name")
        if name and name not in names:
            names.append(name)
    return names

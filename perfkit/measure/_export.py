"""perf_analyzer's `--profile-export-file`: every request's send and response timestamps, per level.

The layout is perf_analyzer's (its profile export schema, as genai-perf and Triton's QA read it):
{"experiments": [{"experiment": {"mode", "value"}, "requests": [{"timestamp", "sequence_id",
"response_timestamps"}], "window_boundaries": [...]}], "version", "service_kind", "endpoint"}.
Timestamps are wall-clock nanoseconds, as perf_analyzer writes them.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from perfkit.records import STATUS_OK, LoadLevel, Samples

# one offset for the whole run: monotonic (perf_counter_ns) -> wall clock
_WALL_OFFSET_NS = time.time_ns() - time.perf_counter_ns()


def level_export(
    samples: Samples,
    mask: Any,
    level: LoadLevel,
    start_ns: int,
    window_ns: int,
    windows: int,
    ends_ns: list[int] | None = None,
) -> dict:
    """One experiment: the level's successful requests and its window boundaries (count windows: ends_ns)."""
    idx = np.flatnonzero(mask & (samples.status == STATUS_OK))
    requests = []
    for i in idx:
        if samples.response_ns is not None and samples.response_ns[i] is not None and len(samples.response_ns[i]):
            responses = [int(t) + _WALL_OFFSET_NS for t in samples.response_ns[i]]
        else:
            responses = [int(samples.done_ns[i]) + _WALL_OFFSET_NS]
        requests.append({"timestamp": int(samples.sent_ns[i]) + _WALL_OFFSET_NS, "response_timestamps": responses})
    mode = "concurrency" if level.mode == "concurrency" else "request_rate"
    if ends_ns:
        bounds = [t + _WALL_OFFSET_NS for t in [start_ns, *ends_ns[:windows]]]
    else:
        bounds = [start_ns + k * window_ns + _WALL_OFFSET_NS for k in range(windows + 1)]
    return {
        "experiment": {"mode": mode, "value": round(level.value)},
        "requests": requests,
        "window_boundaries": bounds,
    }


def write_export(path: Path, experiments: list[dict], version: str) -> None:
    """Write the export file (after every level, so an interrupted run keeps what it measured)."""
    doc = {"experiments": experiments, "version": version, "service_kind": "triton", "endpoint": ""}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))

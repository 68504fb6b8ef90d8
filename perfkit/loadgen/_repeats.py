"""Workloads whose repeats are stated: which requests send an earlier request's inputs.

Triton's response cache answers a request whose inputs (and model) hash like an earlier one's
without running the model (triton-inference-server/server docs/user_guide/response_cache.md), so
its worth depends on how often inputs repeat. `--repeat-fraction F` sends a sequence of requests
in which exactly round(F * n) of every n repeat an earlier request's inputs, spread evenly, each
picking one of the distinct inputs sent before it (seeded; not one of the latest few hundred).
`count_repeats` counts the same figure for requests read from a file (perf_analyzer's --input-data).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from perfkit.loadgen._requests import NP_DTYPES, Tensor

# How many requests one pass of a generated sequence holds: past it the load starts the sequence
# again and every request repeats one already sent (the record says how many a pass holds).
REPEAT_SEQUENCE_REQUESTS = 40_000
# A repeat picks among the inputs sent before the latest this many (while older ones exist): a
# repeat of a request still in flight would miss, Triton inserting a response only as it is sent
# (core src/dynamic_batch_scheduler.cc DelegateResponse), so the hits would fall with the backlog.
REPEAT_MIN_AGE = 256


def check_fraction(fraction: float) -> None:
    """0 <= fraction < 1 (every request a repeat would need a first one); raises ValueError."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"a repeat fraction lies in [0, 1), got {fraction:g}")


def distinct_needed(requests: int, fraction: float) -> int:
    """How many distinct inputs a sequence of `requests` at `fraction` repeats sends."""
    check_fraction(fraction)
    return requests - math.floor(requests * fraction)


def repeat_order(requests: int, fraction: float, seed: int = 0) -> list[int]:
    """The distinct input each request sends (0, 1, ... numbered in order of first use).

    Request i repeats an earlier input exactly when floor((i + 1) * F) > floor(i * F): the first
    n requests then hold floor(n * F) repeats for every n, so any stretch of the sequence is at
    the stated fraction within one request. A repeat sends one of the inputs sent before it,
    uniformly (seeded), leaving out the REPEAT_MIN_AGE latest while older ones exist."""
    check_fraction(fraction)
    i = np.arange(requests, dtype=np.float64)
    repeat = np.floor((i + 1) * fraction) > np.floor(i * fraction)
    distinct_so_far = np.cumsum(~repeat)  # distinct inputs sent up to and including request i
    eligible = np.maximum(distinct_so_far - REPEAT_MIN_AGE, 1)
    picks = np.floor(np.random.default_rng(seed).random(requests) * eligible).astype(np.int64)
    return np.where(repeat, picks, distinct_so_far - 1).astype(int).tolist()


def count_repeats(requests: Sequence[Sequence[Tensor]]) -> tuple[float, int]:
    """(fraction of requests whose inputs equal an earlier request's, distinct inputs): one pass."""
    seen: set[tuple[tuple[str, tuple[int, ...], bytes], ...]] = set()
    repeats = 0
    for tensors in requests:
        key = tuple(sorted((t.name, t.shape, t.data) for t in tensors))
        if key in seen:
            repeats += 1
        seen.add(key)
    return (repeats / len(requests) if requests else 0.0), len(seen)


def write_input_data(path: Path, requests: Sequence[Sequence[Tensor]], *, batched: bool) -> Path:
    """Write requests (batch size 1) as perf_analyzer's --input-data JSON, one step each, in order:
    perf_analyzer then sends them in turn (its docs/input_data.md), repeats where they repeat."""
    steps = []
    for tensors in requests:
        step = {}
        for t in tensors:
            if t.datatype == "BYTES":
                raise ValueError(f"input {t.name}: BYTES inputs are not written (a numeric input model is)")
            shape = list(t.shape[1:] if batched else t.shape)
            values = np.frombuffer(t.data, dtype=NP_DTYPES[t.datatype]).tolist()
            step[t.name] = {"content": values, "shape": shape}
        steps.append(step)
    path.write_text(json.dumps({"data": steps}))
    return path

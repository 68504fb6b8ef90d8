"""perf_analyzer's sustainable rate of one config, level by level: the grid of
benchmarks/predict_quality.py and its re-measurements of each search's pick. One level: a Poisson
`--request-rate-range R` run over gRPC with asynchronous requests, 3 windows; the search over
levels and when a level holds: benchmarks/_quality_figures.py (sustainable, held)."""

from __future__ import annotations

import math
import os
import re
import resource
import subprocess
import time

from benchmarks._anchor import perf_analyzer
from benchmarks._quality_figures import sustainable
from perfkit.errors import ServerError
from perfkit.server import Server

# Each perf_analyzer window holds at least this many requests (a window is lengthened at low rates:
# 1 s windows at 6.4 req/s read 3.0 completed).
WINDOW_REQUESTS = 100
# perf_analyzer's request-rate threads, sending asynchronously: synchronous threads (4 by default)
# each wait for their answer, which capped a 600 req/s level at 225 sent; 256 threads took 20 s to
# end a 3 s level at 13 req/s.
PA_THREADS = 16
# Below this rate a level (3 windows of WINDOW_REQUESTS) takes a minute or more: not measured; a
# config that holds no level above it counts 0.
MIN_RPS = 5.0
# The highest level held is measured again (at most this many times, going on below one that does
# not hold again): a config's figure, in the grid and in a re-measurement, is a level held twice.
RECHECKS = 2
# perf_analyzer's address space at the most. Its asynchronous requests have no cap on those in
# flight, so a level far above capacity piles them up in its memory: on onnx_mlp a 15 s level at
# 17,546 req/s (1.5x a level held at 11,697) reached 19.5 GB of the machine's 23 and swapped the
# machine for 18 minutes before its timeout could end it. Past this limit it fails its allocation
# and exits: the level gives no figure, so it does not hold, which is what it is.
PA_MEMORY_LIMIT_BYTES = 6 << 30
# A config just put on the server serves slowly for a second or so (the tuner's
# TuneSettings.reload_warmup_s): before its levels, perf_analyzer runs this long at the first
# level's rate, and that reading is dropped (with its stability check off, -s 1000, perf_analyzer
# would otherwise count it; on onnx_mlp its first level after a reload read p99 30.8 ms at a rate
# it then held at 6.7 ms).
WARMUP_S = 2.0
# The grid gallops from a prediction by this factor; a re-measurement starts at a search's own
# figure, near the answer, and gallops by the smaller one: a 15 s perf_analyzer level at 1.5x a
# claim (onnx_mlp: 11,939 req/s against 7,960) piled up requests until perf_analyzer failed its
# allocation and left the server at 8.4 GB resident, after which it held 4,600 req/s where it had
# held 8,000 (every later figure of the run was of that server).
GRID_FACTOR = 1.5
REMEASURE_FACTOR = 1.2
# Before each level the server is left to finish what earlier levels queued (wait_idle): polled
# this often, for this long at the most.
IDLE_POLL_S = 0.25
IDLE_TIMEOUT_S = 30.0


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (PA_MEMORY_LIMIT_BYTES, PA_MEMORY_LIMIT_BYTES))


def window_ms(rate: float, seconds: float) -> int:
    """One of a level's 3 windows: a third of `seconds`, longer where that holds under WINDOW_REQUESTS."""
    return int(math.ceil(max(seconds * 1000 / 3, WINDOW_REQUESTS * 1000 / max(rate, 1e-3))))


def pa_level(server: Server, model: str, rate: float, seconds: float, threads: int = PA_THREADS) -> tuple[float, float]:
    """perf_analyzer at one Poisson request rate over gRPC, asynchronous requests (-a) from `threads`
    threads, 3 windows (its stability check off: -s 1000; with -s 100 short windows at low rates end
    "Failed to obtain stable measurement"): (throughput/s, p99 ms)."""
    binary, env = perf_analyzer()
    window = window_ms(rate, seconds)
    cmd = [str(binary), "-m", model, "-u", str(server.endpoints.grpc_url), "-i", "grpc", "-a", "--request-rate-range",
           f"{rate:.6g}", "--request-distribution", "poisson", "--max-threads", str(threads), "--percentile=99",
           "--measurement-interval", str(window), "-r", "3", "-s", "1000"]  # fmt: skip
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env},
                              timeout=3 * window / 1000 * 6 + 30, preexec_fn=_limit_memory)  # fmt: skip
    except subprocess.TimeoutExpired:
        print(f"    perf_analyzer at {rate:.0f}/s did not finish", flush=True)
        return 0.0, math.inf
    out = done.stdout + done.stderr
    tput, p99 = re.findall(r"Throughput: ([0-9.]+) infer/sec", out), re.findall(r"p99 latency: ([0-9.]+) usec", out)
    if not tput or not p99:
        print(f"    perf_analyzer at {rate:.0f}/s gave no figure: {out.strip().splitlines()[-1:]}", flush=True)
        return 0.0, math.inf
    return float(tput[-1]), float(p99[-1]) / 1e3


def _completed(server: Server, model: str) -> int:
    stats = server.model_stats(model).get("model_stats", [])
    return sum(int(m.get("inference_stats", {}).get("success", {}).get("count", 0)) for m in stats)


def wait_idle(server: Server, model: str, timeout_s: float = IDLE_TIMEOUT_S) -> None:
    """Until the server completes nothing more of `model` for IDLE_POLL_S (a level above capacity
    leaves requests queued in the server after perf_analyzer exits, which the next level would
    read as its own latency), or timeout_s."""
    deadline = time.monotonic() + timeout_s
    last = _completed(server, model)
    while time.monotonic() < deadline:
        time.sleep(IDLE_POLL_S)
        now = _completed(server, model)
        if now == last:
            return
        last = now


def pa_sustainable(server: Server, model: str, start: float, budget_ms: float, seconds: float,
                   factor: float = GRID_FACTOR) -> dict:  # fmt: skip
    """The highest rate perf_analyzer holds (benchmarks/_quality_figures.sustainable), from `start`
    (MIN_RPS at the least) after WARMUP_S there, galloping by `factor`, and every level measured."""

    def measure(rate: float) -> tuple[float, float]:
        wait_idle(server, model)
        t, p = pa_level(server, model, rate, seconds)
        if t == 0 and not server.is_ready():  # every level after would fail too: stop here, saying why
            raise ServerError(f"the server stopped answering during perf_analyzer's level at {rate:.0f} req/s")
        print(f"    {rate:8.1f}/s -> {t:8.1f}/s p99 {p:6.1f} ms", flush=True)
        return t, p

    pa_level(server, model, max(start, MIN_RPS), WARMUP_S)  # the config's warm-up, not a level
    best, levels = sustainable(measure, max(start, MIN_RPS), budget_ms, factor=factor, min_rps=MIN_RPS,
                               rechecks=RECHECKS)  # fmt: skip
    return {"rps": best, "levels": [lv.__dict__ for lv in levels]}

"""perf_analyzer 2.60.0's figure of one config under each load benchmarks/predict_cases.py tunes:
open loop (a Poisson rate, benchmarks/_pa_rate.py), closed loop (N concurrent clients), a traffic
mix (one perf_analyzer per model at once, each at its share of the total rate, each held to its
own budget) and a stream under a TTFT budget (the first response's time from perf_analyzer's
profile export). Each is a `measure(rate) -> (throughput, p99 against a budget)` that
benchmarks/_quality_figures.sustainable searches, or (closed loop) a walk over concurrencies."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from benchmarks._anchor import perf_analyzer
from benchmarks._pa_rate import MIN_RPS, PA_THREADS, RECHECKS, WINDOW_REQUESTS, _limit_memory, wait_idle
from benchmarks._quality_figures import sustainable
from perfkit.server import Server

Measure = Callable[[float], tuple[float, float]]
# A mix's levels report the worst model's p99 as a share of its own budget, scaled to this "budget".
SHARE_BUDGET = 100.0


def window_ms(rate: float, seconds: float, requests: int = WINDOW_REQUESTS) -> int:
    """One of a level's 3 windows: a third of `seconds`, longer where that holds under `requests`."""
    return int(math.ceil(max(seconds * 1000 / 3, requests * 1000 / max(rate, 1e-3))))


def _cmd(server: Server, model: str, window: int, extra: list[str]) -> list[str]:
    binary, _ = perf_analyzer()
    return [str(binary), "-m", model, "-u", str(server.endpoints.grpc_url), "-i", "grpc", "--percentile=99",
            "--measurement-interval", str(window), "-r", "3", "-s", "1000", *extra]  # fmt: skip


def _rate_args(rate: float) -> list[str]:
    return ["-a", "--request-rate-range", f"{rate:.6g}", "--request-distribution", "poisson",
            "--max-threads", str(PA_THREADS)]  # fmt: skip


def _figures(out: str) -> tuple[float, float]:
    tput, p99 = re.findall(r"Throughput: ([0-9.]+) infer/sec", out), re.findall(r"p99 latency: ([0-9.]+) usec", out)
    if not tput or not p99:
        print(f"    perf_analyzer gave no figure: {out.strip().splitlines()[-1:]}", flush=True)
        return 0.0, math.inf
    return float(tput[-1]), float(p99[-1]) / 1e3


def _run_all(cmds: list[list[str]], timeout_s: float) -> list[str]:
    """The commands at once (a mix's models loaded together); each one's output, '' where it hung."""
    _, env = perf_analyzer()
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, **env}, preexec_fn=_limit_memory)  # noqa: PLW1509 (an rlimit, as _pa_rate's)
             for c in cmds]  # fmt: skip
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=timeout_s)[0])
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            outs.append("")
    return outs


def mix_measure(server: Server, weights: Mapping[str, int], budgets_ms: Mapping[str, float], seconds: float,
                requests: int = WINDOW_REQUESTS) -> Measure:  # fmt: skip
    """A total rate split by the mix's weights, one perf_analyzer per model at once: (the models'
    throughput summed, the worst model's p99 / its own budget x SHARE_BUDGET)."""
    total = sum(weights.values())

    def measure(rate: float) -> tuple[float, float]:
        for m in weights:
            wait_idle(server, m)
        rates = {m: rate * w / total for m, w in weights.items()}
        window = max(window_ms(r, seconds, requests) for r in rates.values())
        cmds = [_cmd(server, m, window, _rate_args(r)) for m, r in rates.items()]
        figs = [_figures(o) for o in _run_all(cmds, 3 * window / 1000 * 6 + 30)]
        tput = sum(t for t, _ in figs)
        share = max(p / budgets_ms[m] for (_, p), m in zip(figs, rates, strict=True)) * SHARE_BUDGET
        held = all(t >= 0.9 * rates[m] for (t, _), m in zip(figs, rates, strict=True))
        print(f"    {rate:8.1f}/s -> {tput:8.1f}/s worst p99 {share:5.0f}% of its budget", flush=True)
        return (tput if held else min(tput, 0.5 * rate)), share

    return measure


def stream_measure(
    server: Server, model: str, seconds: float, responses: int, requests: int = WINDOW_REQUESTS
) -> Measure:
    """A Poisson rate of streams over gRPC: (streams completed/s, TTFT p99 ms from the profile export:
    each request's first response timestamp against its send time)."""

    def measure(rate: float) -> tuple[float, float]:
        wait_idle(server, model)
        export = Path(tempfile.mkdtemp()) / "pa.json"
        window = window_ms(rate, seconds, requests)
        cmd = _cmd(server, model, window, [*_rate_args(rate), "--streaming", "--profile-export-file", str(export)])
        (out,) = _run_all([cmd], 3 * window / 1000 * 6 + 30)
        tput, _ = _figures(out)
        ttft, answered = [], 0
        if export.exists():
            for exp in json.loads(export.read_text()).get("experiments", []):
                for req in exp.get("requests", []):
                    times = list(req.get("response_timestamps", []))
                    answered += len(times)
                    if times[:responses]:
                        ttft.append(times[0] - req["timestamp"])
        # perf_analyzer's throughput of a decoupled model counts responses; a stream is one request,
        # and the tune's rate is in streams: scaled by the export's requests per response
        tput = tput * len(ttft) / answered if answered else 0.0
        p99 = float(np.percentile(ttft, 99)) / 1e6 if ttft else math.inf
        print(f"    {rate:8.1f}/s -> {tput:8.1f}/s TTFT p99 {p99:6.1f} ms", flush=True)
        return tput, p99

    return measure


def rate_measure(server: Server, model: str, seconds: float, requests: int = WINDOW_REQUESTS) -> Measure:
    """One model (or an ensemble) at a Poisson rate: (throughput, p99 ms)."""

    def measure(rate: float) -> tuple[float, float]:
        wait_idle(server, model)
        window = window_ms(rate, seconds, requests)
        (out,) = _run_all([_cmd(server, model, window, _rate_args(rate))], 3 * window / 1000 * 6 + 30)
        t, p = _figures(out)
        print(f"    {rate:8.1f}/s -> {t:8.1f}/s p99 {p:6.1f} ms", flush=True)
        return t, p

    return measure


def sustainable_rps(measure: Measure, start: float, budget_ms: float, factor: float) -> dict:
    """The highest rate `measure` holds from `start`, after a warm-up level there not counted."""
    measure(max(start, MIN_RPS))  # the config's warm-up after its reload (benchmarks/_pa_rate.py WARMUP_S)
    best, levels = sustainable(measure, max(start, MIN_RPS), budget_ms, factor=factor, min_rps=MIN_RPS,
                               rechecks=RECHECKS)  # fmt: skip
    return {"rps": best, "levels": [lv.__dict__ for lv in levels]}


def closed_loop(server: Server, model: str, budget_ms: float, max_concurrency: int, seconds: float) -> dict:
    """N clients, each sending when its answer returns (perf_analyzer's concurrency mode), N doubling
    from 1 to max_concurrency: the throughput at the highest N whose p99 is within the budget (the
    closed-loop tune's figure), 0 where none holds."""
    levels, best, n = [], 0.0, 1
    while n <= max_concurrency:
        wait_idle(server, model)
        (out,) = _run_all([_cmd(server, model, int(seconds * 1000 / 3), ["--concurrency-range", str(n)])],
                          seconds * 6 + 30)  # fmt: skip
        t, p = _figures(out)
        print(f"    c{n:<3} -> {t:8.1f}/s p99 {p:6.1f} ms", flush=True)
        levels.append({"concurrency": n, "throughput_rps": t, "p99_ms": p})
        if p > budget_ms:
            break
        best = max(best, t)
        n *= 2
    return {"rps": best, "levels": levels}

"""How fast does the batcher simulator score a tuning space, and how close is it to closed forms?

No server. The service model is the batch-hungry fixture's (fixtures/models/hungry at fp16:
16.5 ms + 0.165 ms per item on one device shared by its instances, 0.5 ms overhead), p99 <= 50 ms.
Two spaces: the tuner's (max_batch_size {1, 2, 4, ..., 128} x dynamic batching off / on with a
queue delay of 0 or 8 log-spaced values from 100 us to 20 ms x preferred sizes {none, pow2} x
instances {1..4}: 572 configs) and a large one (max_batch_size up to 512, 13 queue delays from 0
to 20 ms, instances {1..8}: 2,056 configs).

Printed, paired in one run: the tuner's space scored as before this simulator's speed work (the
event loop in Python, one rules call a batch; each rate search a bisection from the capacity
bound) and as now (the loop compiled by numba, perfkit/predict/_simloop.py, and each search
started at a like config's rate), every config simulated and with the best 3 kept (the tuner's
way: configs whose capacity bound is below the 3rd best are not simulated); then the large space,
now. First, what the compiled loop costs a new process before its first simulation (importing
numba, then compiling the loop with an empty cache, or loading it from a warm one), each in a
child process with its own cache directory, and one 6,000-request run of each loop. The anchor
is one M/D/1 sustainable-rate search (the Python reference loop) timed in the same run, with its
error against Erlang's exact sustainable rate; each figure also gives the CPU seconds the process
spent (on a shared machine the wall time moves with the others' load); and how far the new
scores are from the old ones (they differ only where holding the budget is not monotone in the
rate).

    .venv/bin/python benchmarks/predict_speed.py            # both spaces (~1 minute)
    .venv/bin/python benchmarks/predict_speed.py --quick    # max_batch_size up to 16, no large space
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repo root: tests.support.queueing

from perfkit.predict import (  # noqa: E402
    BatcherConfig,
    Contention,
    RateResult,
    ServiceModel,
    _sim,
    score_space,
    sustainable_rate,
    unit_arrivals,
)
from tests.support.queueing import sustainable_rate_rps  # noqa: E402

DELAYS_US = (0.0, 100.0, 200.0, 500.0, 1_000.0, 2_000.0, 5_000.0, 10_000.0, 20_000.0)
LARGE_DELAYS_US = (0.0, 50.0, 100.0, 200.0, 500.0, 1_000.0, 2_000.0, 3_000.0, 5_000.0, 7_000.0, 10_000.0, 15_000.0,
                   20_000.0)  # fmt: skip
SERVICE = ServiceModel(16_500, 165, overhead_us=500)
SHARED = Contention(1.0)
BUDGET_US = 50_000.0


def space(largest: int, delays: tuple[float, ...] = DELAYS_US, instances: int = 4) -> list[BatcherConfig]:
    """The benchmark's configs (see the module docstring)."""
    counts = range(1, instances + 1)
    sizes = [2**i for i in range(10) if 2**i <= largest]
    out = [BatcherConfig(b, False, (), 0.0, c) for b in sizes for c in counts]
    for b in sizes:
        pow2 = tuple(s for s in sizes if 2 <= s <= b)
        for pref in ((), pow2):
            for d in delays:
                out.extend(BatcherConfig(b, True, pref, d, c) for c in counts)
    return list(dict.fromkeys(out))


CPU_S: dict[float, float] = {}  # wall seconds of a timed call -> the CPU seconds this process spent in it


def _timed(cfgs: list[BatcherConfig], requests: int, **how: object) -> tuple[list[RateResult], float]:
    t0, c0 = time.perf_counter(), time.process_time()
    out = score_space(cfgs, SERVICE, BUDGET_US, contention=SHARED, requests=requests, **how)  # type: ignore[arg-type]  # the benchmark's own keyword sets
    wall = time.perf_counter() - t0
    CPU_S[wall] = time.process_time() - c0
    return out, wall


def _line(what: str, n: int, seconds: float, anchor_s: float, extra: str = "") -> str:
    rate = f"{n / seconds:.0f} configs/s, {seconds / anchor_s:.1f}x the anchor"
    cpu = f", {CPU_S[seconds]:.2f} s of CPU" if seconds in CPU_S else ""
    return f"{what}: {n} configs in {seconds:.2f} s ({rate}{cpu}){extra}"


# A new process's first simulation: import numba, then the loop compiled or loaded from the cache.
FIRST_CALL = """
import json, time
t0, c0 = time.perf_counter(), time.process_time()
import numba
t1, c1 = time.perf_counter(), time.process_time()
from perfkit.predict import _simloop
t2, c2 = time.perf_counter(), time.process_time()
stats = _simloop.run_open.stats
print(json.dumps({"import_s": t1 - t0, "import_cpu_s": c1 - c0, "loop_s": t2 - t1, "loop_cpu_s": c2 - c1,
                  "compiled": sum(stats.cache_misses.values()), "version": numba.__version__}))
"""


def _first_calls() -> list[str]:
    """The compiled loop's cost to a new process, with an empty cache then with the cache it left."""
    lines = []
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        for what in ("empty cache", "warm cache"):
            out = subprocess.run([sys.executable, "-c", FIRST_CALL], env=env, capture_output=True, text=True)
            out.check_returncode()
            r = json.loads(out.stdout)
            how = "compiled" if r["compiled"] else "loaded"
            lines.append(f"first call, {what}: import numba {r['version']} {r['import_s']:.2f} s"
                         f" ({r['import_cpu_s']:.2f} s of CPU), loop {how} in {r['loop_s']:.2f} s"
                         f" ({r['loop_cpu_s']:.2f} s of CPU)")  # fmt: skip
    return lines


def _one_run(requests: int) -> str:
    """One open-loop run of a batching config at `requests` requests, each loop, best of several."""
    cfg = BatcherConfig(32, True, (4, 8, 16, 32), 2_000.0, 2)
    due = unit_arrivals("poisson", requests, seed=3) / 400.0
    runs = {"compiled": lambda: _sim._run_open(due, cfg, SERVICE, SHARED),
            "reference": lambda: _sim._run_open_reference(due.tolist(), cfg, SERVICE, SHARED)}  # fmt: skip
    times = {}
    for loop, reps in (("compiled", 200), ("reference", 5)):
        best = np.inf
        for _ in range(reps):
            t0 = time.perf_counter()
            runs[loop]()
            best = min(best, time.perf_counter() - t0)
        times[loop] = best
    return (f"one {requests}-request run: compiled loop {times['compiled'] * 1e6:.0f} us, reference loop"
            f" {times['reference'] * 1e3:.1f} ms ({times['reference'] / times['compiled']:.0f}x)")  # fmt: skip


def main() -> None:
    """Run the benchmark and print its figures."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="max_batch_size up to 16, no large space")
    ap.add_argument("--requests", type=int, default=6_000, help="simulated requests per rate (the tuner's 6,000)")
    args = ap.parse_args()
    cfgs = space(16 if args.quick else 128)
    for line in _first_calls():
        print(line)
    print(_one_run(args.requests))

    t0 = time.perf_counter()
    md1 = sustainable_rate(
        BatcherConfig(), ServiceModel(10_000, 0), 100_000.0, requests=args.requests, loop="reference"
    )
    anchor_s = time.perf_counter() - t0
    truth = sustainable_rate_rps("M/D/1", 10.0, 100.0)
    print(f"anchor: one M/D/1 rate search (reference loop), {anchor_s * 1e3:.0f} ms; {md1.rate_rps:.1f} req/s vs"
          f" Erlang's {truth:.1f} ({md1.rate_rps / truth - 1:+.1%})")  # fmt: skip

    before = {"warm_start": False, "loop": "reference"}
    old_full, old_full_s = _timed(cfgs, args.requests, **before)
    old_kept, old_kept_s = _timed(cfgs, args.requests, keep=3, **before)
    new_full, new_full_s = _timed(cfgs, args.requests)
    new_kept, new_kept_s = _timed(cfgs, args.requests, keep=3)
    print(_line("before, every config simulated", len(cfgs), old_full_s, anchor_s))
    print(_line("before, best 3 kept", len(cfgs), old_kept_s, anchor_s))
    print(
        _line(
            "now, every config simulated", len(cfgs), new_full_s, anchor_s, f"; {old_full_s / new_full_s:.1f}x faster"
        )
    )
    print(_line("now, best 3 kept", len(cfgs), new_kept_s, anchor_s, f"; {old_kept_s / new_kept_s:.1f}x faster"))
    old = {r.config: r.rate_rps for r in old_full}
    rel = [abs(r.rate_rps / old[r.config] - 1) if old[r.config] > 0 else float(r.rate_rps > 0) for r in new_full]
    same = sum(1 for x in rel if x < 1e-9)
    near = sum(1 for x in rel if x <= 0.05)
    top = [r.config for r in new_full[:3]] == [r.config for r in old_full[:3]]
    kept_top = [r.config for r in new_kept[:3]] == [r.config for r in new_full[:3]]
    print(f"now vs before: {same} of {len(rel)} rates equal, {near} within 5%, worst {max(rel):.0%}; same best 3:"
          f" {top}; best 3 kept = best 3 of all: {kept_top}")  # fmt: skip
    for r in new_full[:3]:
        c = r.config
        print(f"  mbs {c.max_batch_size} db {c.dynamic_batching} pref {list(c.preferred_batch_sizes) or 'none'}"
              f" delay {c.max_queue_delay_us:g} us x{c.instances}: {r.rate_rps:.0f} req/s, p99"
              f" {r.latency_us / 1e3:.1f} ms, mean batch {r.mean_batch:.1f}")  # fmt: skip
    if args.quick:
        return
    large = space(512, LARGE_DELAYS_US, 8)
    _, large_s = _timed(large, args.requests)
    _, large_kept_s = _timed(large, args.requests, keep=3)
    print(_line("large space now, every config simulated", len(large), large_s, anchor_s))
    print(_line("large space now, best 3 kept", len(large), large_kept_s, anchor_s))


if __name__ == "__main__":
    main()

"""How fast does the batcher simulator score a tuning space, and how close is it to closed forms?

No server. The space is the batch-hungry fixture's (fixtures/models/hungry at fp16: 16.5 ms +
0.165 ms per item on one device shared by its instances, 0.5 ms overhead), p99 <= 50 ms:
max_batch_size {1, 2, 4, ..., 128} x dynamic batching off / on with a queue delay of 0 or
8 log-spaced values from 100 us to 20 ms x preferred sizes {none, pow2} x instances {1..4}.

Printed: configs scored, wall time, configs per second, with the best k kept (the tuner's
way: configs whose capacity bound is below the k-th best are not simulated) and with every
config simulated; the anchor is one M/D/1 sustainable-rate search timed in the same run, and
the M/D/1 error against Erlang's exact sustainable rate.

    .venv/bin/python benchmarks/predict_speed.py            # the whole space (~2,000 configs)
    .venv/bin/python benchmarks/predict_speed.py --quick    # max_batch_size up to 16
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repo root: tests.queueing

from perfkit.predict import BatcherConfig, Contention, ServiceModel, score_space, sustainable_rate  # noqa: E402
from tests.queueing import sustainable_rate_rps  # noqa: E402

DELAYS_US = (0.0, 100.0, 200.0, 500.0, 1_000.0, 2_000.0, 5_000.0, 10_000.0, 20_000.0)


def space(largest: int) -> list[BatcherConfig]:
    """The benchmark's configs (see the module docstring)."""
    sizes = [2**i for i in range(8) if 2**i <= largest]
    out = [BatcherConfig(b, False, (), 0.0, c) for b in sizes for c in (1, 2, 3, 4)]
    for b in sizes:
        pow2 = tuple(s for s in sizes if 2 <= s <= b)
        for pref in ((), pow2):
            for d in DELAYS_US:
                out.extend(BatcherConfig(b, True, pref, d, c) for c in (1, 2, 3, 4))
    return list(dict.fromkeys(out))


def main() -> None:
    """Run the benchmark and print its figures."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="max_batch_size up to 16")
    ap.add_argument("--requests", type=int, default=6_000, help="simulated requests per rate (the tuner's 6,000)")
    args = ap.parse_args()
    svc = ServiceModel(16_500, 165, overhead_us=500)
    shared = Contention(1.0)
    cfgs = space(16 if args.quick else 128)

    t0 = time.perf_counter()
    md1 = sustainable_rate(BatcherConfig(), ServiceModel(10_000, 0), 100_000.0, requests=args.requests)
    anchor_s = time.perf_counter() - t0
    truth = sustainable_rate_rps("M/D/1", 10.0, 100.0)
    print(f"anchor: one M/D/1 rate search, {anchor_s * 1e3:.0f} ms; {md1.rate_rps:.1f} req/s vs Erlang's {truth:.1f}"
          f" ({md1.rate_rps / truth - 1:+.1%})")  # fmt: skip

    t0 = time.perf_counter()
    kept = score_space(cfgs, svc, 50_000.0, contention=shared, requests=args.requests, keep=3)
    kept_s = time.perf_counter() - t0
    simulated = sum(1 for r in kept if not r.bounded)
    print(f"best 3 kept: {len(cfgs)} configs in {kept_s:.2f} s ({len(cfgs) / kept_s:.0f} configs/s,"
          f" {kept_s / anchor_s:.1f}x the anchor), {simulated} simulated")  # fmt: skip
    for r in kept[:3]:
        c = r.config
        print(f"  mbs {c.max_batch_size} db {c.dynamic_batching} pref {list(c.preferred_batch_sizes) or 'none'}"
              f" delay {c.max_queue_delay_us:g} us x{c.instances}: {r.rate_rps:.0f} req/s, p99"
              f" {r.latency_us / 1e3:.1f} ms, mean batch {r.mean_batch:.1f}")  # fmt: skip

    t0 = time.perf_counter()
    full = score_space(cfgs, svc, 50_000.0, contention=shared, requests=args.requests)
    full_s = time.perf_counter() - t0
    same = [r.config for r in full[:3]] == [r.config for r in kept[:3]]
    print(f"every config simulated: {len(cfgs)} configs in {full_s:.1f} s ({len(cfgs) / full_s:.0f} configs/s,"
          f" {full_s / anchor_s:.1f}x the anchor); same best 3 as kept: {same}")  # fmt: skip


if __name__ == "__main__":
    main()

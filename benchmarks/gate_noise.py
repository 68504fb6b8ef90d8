"""Noise study: how often does the gate cry wolf when nothing changed?

Simulated (no server): each CI job has its own speed factor (a neighbour on the runner,
thermal state, the host's load), lognormal with sigma --job-noise; each window inside a
job adds --window-noise. Nothing changes between baseline and candidate, so every
failure is a false alarm.

  stored:  baseline from job 1, current from job 2 (two job factors, unseen by the windows)
  A/B:     baseline and candidate interleaved in one job (one job factor, shared)

The default job noise (5%) is what this repo's sweeps/ci-smoke.toml showed between
back-to-back runs on a shared 2-core machine (sleeper: -4.9% throughput at concurrency 1).

  .venv/bin/python benchmarks/gate_noise.py            # ~10 s
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from perfkit.gate import GateOptions, compare_records, parse_thresholds
from perfkit.gate.merge import merge_runs
from perfkit.gate.synthetic import synthetic_record


def _job_factor(rng: np.random.Generator, sigma: float) -> float:
    return float(np.exp(rng.normal(0.0, sigma)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--job-noise", type=float, default=0.05)
    ap.add_argument("--window-noise", type=float, default=0.03)
    ap.add_argument("--windows", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3, help="A/B rounds per arm")
    ap.add_argument("--threshold", action="append", default=None)
    args = ap.parse_args()
    opts = GateOptions(thresholds=tuple(parse_thresholds(args.threshold or [])))
    rng = np.random.default_rng(0)
    level = {"windows": args.windows, "window_s": 2.0, "noise": args.window_noise}
    ab_level = {**level, "windows": max(2, args.windows // args.rounds)}
    counts = {"stored": {}, "ab": {}}
    t0 = time.perf_counter()
    for trial in range(args.trials):
        seed = 1000 * trial
        base = synthetic_record(seed=seed, offset=_job_factor(rng, args.job_noise), **level)
        cur = synthetic_record(seed=seed + 500, offset=_job_factor(rng, args.job_noise), **level)
        v = compare_records(base, cur, opts).verdict
        counts["stored"][v] = counts["stored"].get(v, 0) + 1
        job = _job_factor(rng, args.job_noise)
        arms = [
            merge_runs([synthetic_record(seed=seed + 10 * r + arm, offset=job, **ab_level) for r in range(args.rounds)])
            for arm in (1, 2)
        ]
        v = compare_records(arms[0], arms[1], opts, comparison="ab").verdict
        counts["ab"][v] = counts["ab"].get(v, 0) + 1
    elapsed = time.perf_counter() - t0
    thresholds = ", ".join(t.text for t in opts.thresholds)
    print(f"{args.trials} no-change comparisons per mode; job noise {args.job_noise:.0%}, window noise "
          f"{args.window_noise:.0%}, thresholds {thresholds} ({elapsed:.1f} s)")  # fmt: skip
    for mode, c in counts.items():
        alarms = c.get("regression", 0)
        shown = ", ".join(f"{k} {v}" for k, v in sorted(c.items()))
        print(f"  {mode:7} false regressions {alarms / args.trials:6.1%}   ({shown})")


if __name__ == "__main__":
    main()

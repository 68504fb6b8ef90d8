"""Noise study: how often does the gate cry wolf when nothing changed?

Simulated (no server): each CI job has its own speed factor (a neighbour on the runner,
thermal state, the host's load), lognormal with sigma --job-noise; each window inside a
job adds --window-noise. Nothing changes between baseline and candidate, so every
failure is a false alarm.

  stored:  baseline from job 1, current from job 2 (two job factors, unseen by the windows),
           judged with the gate's default job-to-job allowance and without one
  A/B:     baseline and candidate interleaved in one job (one job factor, shared)

Then the same with a true slowdown (every latency x1.3, x1.6): how often each mode catches it.

The default job noise (5%) is what this repo's sweeps/ci-smoke.toml showed between
back-to-back runs on a shared 2-core machine (sleeper: -4.9% throughput at concurrency 1).

  .venv/bin/python benchmarks/gate_noise.py            # ~1 min
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from perfkit.gate import GateOptions, compare_records, parse_job_noise, parse_thresholds
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
    ap.add_argument("--slowdowns", default="1.3,1.6", help="true slowdowns (latency factors) to detect")
    args = ap.parse_args()
    thresholds = tuple(parse_thresholds(args.threshold or []))
    gates = {
        "default": GateOptions(thresholds=thresholds),
        "no allowance": GateOptions(thresholds=thresholds, job_noise_pct=parse_job_noise(["all:0%"])),
    }
    level = {"windows": args.windows, "window_s": 2.0, "noise": args.window_noise}
    ab_level = {**level, "windows": max(2, args.windows // args.rounds)}
    t0 = time.perf_counter()
    print(f"{args.trials} comparisons per case; job noise {args.job_noise:.0%}, window noise {args.window_noise:.0%}, "
          f"thresholds {', '.join(t.text for t in thresholds)}; share flagged as a regression")  # fmt: skip
    print(f"  {'mode':8} {'gate':13} " + " ".join(f"{'x' + s:>9}" for s in ["1.0", *args.slowdowns.split(",")]))
    for mode in ("stored", "ab"):
        for name, opts in gates.items():
            if mode == "ab" and name != "default":
                continue  # A/B carries no allowance either way
            shares = []
            for factor in [1.0, *(float(x) for x in args.slowdowns.split(","))]:
                rng = np.random.default_rng(0)
                alarms = 0
                for trial in range(args.trials):
                    seed = 1000 * trial
                    if mode == "stored":
                        base = synthetic_record(seed=seed, offset=_job_factor(rng, args.job_noise), **level)
                        cur = synthetic_record(
                            seed=seed + 500, offset=factor * _job_factor(rng, args.job_noise), **level
                        )
                    else:
                        job = _job_factor(rng, args.job_noise)
                        base, cur = (
                            merge_runs(
                                [
                                    synthetic_record(seed=seed + 10 * r + arm, offset=job * f, **ab_level)
                                    for r in range(args.rounds)
                                ]
                            )
                            for arm, f in ((1, 1.0), (2, factor))
                        )
                    alarms += compare_records(base, cur, opts, comparison=mode).verdict == "regression"
                shares.append(alarms / args.trials)
            print(f"  {mode:8} {name:13} " + " ".join(f"{x:9.1%}" for x in shares))
    print(f"({time.perf_counter() - t0:.1f} s; x1.0: false alarms, nothing changed; x1.3, x1.6: caught slowdowns)")


if __name__ == "__main__":
    main()

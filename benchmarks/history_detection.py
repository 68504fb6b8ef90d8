"""How well `perfkit history` finds change points: detection rate and false alarms per 100 runs.

Simulated series (no server): N runs with lognormal run-to-run noise (sd --noise, default 1.5%:
what unchanged runs of the `sleeper` fixture move throughput by on a shared 2-core runner), and
  - a step of S% at the middle run: found when a regression is reported within +-2 runs of it;
    any other change reported counts as a false alarm;
  - no change at all: every change reported is a false alarm;
  - a drift of D% per run over the second half (many small merges): found when any regression
    is reported in the drifting half.
Judged exactly as `perfkit history` judges (E-divisive means, alpha 0.01, 3 runs a side, changes
smaller than the throughput job noise, 3%, not reported).

  .venv/bin/python benchmarks/history_detection.py        # ~1 min
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from perfkit.history import ChangeOptions, Point, Series, detect


def _series(values: np.ndarray) -> Series:
    points = tuple(Point(f"r{i}", f"t{i:04d}", "", "m", float(v), v, v) for i, v in enumerate(values))
    return Series("m", "concurrency 1", "throughput", "infer/s", points, 3.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--series", type=int, default=100)
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--noise", type=float, default=0.015)
    args = ap.parse_args()
    n, at = args.runs, args.runs // 2
    print(f"{args.series} series of {n} runs, noise sd {args.noise:.1%}, change at run {at}")
    print(f"{'scenario':<28}{'detected':>10}{'false alarms / 100 runs':>26}{'s':>7}")
    for name, step, drift in (
        ("no change", 0.0, 0.0),
        ("step -3%", -3.0, 0.0),
        ("step -5%", -5.0, 0.0),
        ("step -10%", -10.0, 0.0),
        ("drift -0.5%/run", 0.0, -0.5),
        ("drift -1%/run", 0.0, -1.0),
    ):
        t0 = time.perf_counter()
        found = alarms = 0
        for seed in range(args.series):
            rng = np.random.default_rng(seed)
            x = 100.0 * np.exp(rng.normal(0.0, args.noise, n))
            x[at:] *= 1 + step / 100
            if drift:
                x[at:] *= (1 + drift / 100) ** np.arange(1, n - at + 1)
            hit = False
            for c in detect(_series(x), ChangeOptions(seed=seed)):
                regression_after = c.direction == "regression" and c.index >= at - 2
                at_step = step and not hit and abs(c.index - at) <= 2
                if regression_after and (at_step or drift):
                    hit = True
                else:
                    alarms += 1
            found += hit
        rate = "-" if not (step or drift) else f"{found}/{args.series}"
        per_100 = alarms / (args.series * n) * 100
        print(f"{name:<28}{rate:>10}{per_100:>26.3f}{time.perf_counter() - t0:>7.1f}")


if __name__ == "__main__":
    main()

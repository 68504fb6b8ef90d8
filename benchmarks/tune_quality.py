"""How good is perfkit tune's pick, and how cheaply? Exhaustive grid vs the Optuna search.

On a private copy of the batcher fixture, with a latency budget that rules out the extremes:
1. runs the full grid over a small space once (the reference: every config measured),
2. runs `perfkit tune` (TPE) on the same space with at most 25% of the grid's trials,
3. re-measures the grid's best and perfkit's pick in the same run, alternating, and prints
   throughput ratio, trials, wall time, and the split of trial time between reload and measurement.

Goal: perfkit's pick reaches >= 95% of the grid's best with <= 25% of its trials.

    .venv/bin/python benchmarks/tune_quality.py            # ~8 min on 2 cores
    .venv/bin/python benchmarks/tune_quality.py --quick    # smaller grid, ~3 min
"""

from __future__ import annotations

import argparse
import math
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from perfkit.measure import profile
from perfkit.server import LocalLaunch, launch_local
from perfkit.server.modelconfig import read_config, write_config
from perfkit.tuner import TuneResult, TuneSettings, TuneSpace, grid_points, judge, resolve, tune

ROOT = Path(__file__).resolve().parent.parent


def _settings(out: Path, budget_ms: float, trials: int, sampler: str, seed: int) -> TuneSettings:
    return TuneSettings(
        model="batcher",
        latency_budget_ms=budget_ms,
        trials=trials,
        output_dir=out,
        sampler=sampler,  # type: ignore[arg-type]
        seed=seed,
        max_concurrency=16,
        measurement_interval_ms=300,
    )


def _time_split(result: TuneResult) -> tuple[int, float, float, float]:
    measured = [t for t in result.record.trials if "reload_s" in t.metrics and "duplicate_of" not in t.metrics]
    reload_s = statistics.mean(t.metrics["reload_s"] for t in measured)
    measure_s = statistics.mean(t.metrics["measure_s"] for t in measured)
    total_s = statistics.mean(t.duration_s for t in measured)
    return len(measured), reload_s, measure_s, total_s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget-ms", type=float, default=12.0)
    ap.add_argument("--quick", action="store_true", help="a smaller grid (instances 1,2; precisions fp32,int8)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=2, help="re-measurement rounds of each pick")
    args = ap.parse_args()

    space = TuneSpace(
        max_batch_sizes=(4, 8),
        queue_delay_us=(2000, 2000),
        preferred_batch_sizes=("none",),
        instance_counts=(1, 2) if args.quick else (1, 2, 3),
        precisions=("fp32", "int8") if args.quick else ("fp32", "fp16", "int8"),
    )
    work = Path(tempfile.mkdtemp(prefix="perfkit-tune-bench-"))
    repo = work / "models"
    shutil.copytree(
        ROOT / "fixtures" / "models" / "batcher", repo / "batcher", ignore=shutil.ignore_patterns("__pycache__")
    )
    cfg_path = repo / "batcher" / "config.pbtxt"
    original = cfg_path.read_bytes()
    resolved = resolve(space, read_config(cfg_path), repo / "batcher", latency_budget_us=args.budget_ms * 1e3)
    grid_n = math.prod(len(v) for v in grid_points(resolved).values())
    tune_n = max(1, math.floor(0.25 * grid_n))
    print(f"space: {', '.join(d.describe() for d in resolved.dimensions)}")
    print(f"grid: {grid_n} configs; perfkit tune: {tune_n} trials; budget p99 <= {args.budget_ms:g} ms")

    quiet = lambda line: None  # noqa: E731
    with launch_local(LocalLaunch(repo, models=("batcher",))) as server:
        t0 = time.monotonic()
        grid = tune(server, _settings(work / "grid", args.budget_ms, grid_n, "grid", args.seed), space,
                    model_repository=repo, echo=quiet)  # fmt: skip
        grid_wall = time.monotonic() - t0
        t0 = time.monotonic()
        tuned = tune(server, _settings(work / "tune", args.budget_ms, tune_n, "auto", args.seed), space,
                     model_repository=repo, echo=print)  # fmt: skip
        tune_wall = time.monotonic() - t0
        assert cfg_path.read_bytes() == original, "the tuner did not restore the config"
        g_best, t_best = grid.best, tuned.best
        if g_best is None or t_best is None:
            print("no feasible config: lower the load or raise --budget-ms")
            return 1
        picks = {"grid": grid.record.best_config or "", "perfkit": tuned.record.best_config or ""}
        spec = _settings(work / "x", args.budget_ms, 1, "auto", 0).judge_settings(None).spec("batcher")
        again: dict[str, list[float]] = {"grid": [], "perfkit": []}
        try:
            for _ in range(args.rounds):
                for label, text in picks.items():
                    write_config(cfg_path, text)
                    server.load_model("batcher")
                    v = judge(profile(server, spec), latency_budget_ms=args.budget_ms, percentile=99)
                    again[label].append(v.throughput_infer_per_s or 0.0)
        finally:
            write_config(cfg_path, original.decode())
    shutil.rmtree(work, ignore_errors=True)

    g_n, g_reload, g_meas, g_total = _time_split(grid)
    t_n, t_reload, t_meas, t_total = _time_split(tuned)
    g_re, t_re = statistics.mean(again["grid"]), statistics.mean(again["perfkit"])
    ratio = t_re / g_re if g_re else 0.0
    print()
    print(f"grid best     trial {g_best.number:>3} {g_best.params}: {g_best.throughput_infer_per_s:.0f}/s in the grid")
    print(f"perfkit pick  trial {t_best.number:>3} {t_best.params}: {t_best.throughput_infer_per_s:.0f}/s in its run")
    same = " (same config)" if g_best.config_sha256 == t_best.config_sha256 else ""
    print(f"re-measured ({args.rounds} rounds, alternating): grid best {g_re:.0f}, perfkit {t_re:.0f} infer/s"
          f" -> {100 * ratio:.1f}% of the grid's best{same}")  # fmt: skip
    print(f"trials: grid {g_n}, perfkit {t_n} ({100 * t_n / g_n:.0f}% of the grid's)")
    print(f"wall: grid {grid_wall:.0f} s, perfkit {tune_wall:.0f} s")
    print(f"per trial: grid {g_total:.1f} s (reload {g_reload:.1f} s, measure {g_meas:.1f} s); "
          f"perfkit {t_total:.1f} s (reload {t_reload:.1f} s, measure {t_meas:.1f} s)")  # fmt: skip
    ok = ratio >= 0.95 and t_n <= 0.25 * g_n
    print(f"goal >= 95% with <= 25% of the trials: {'met' if ok else 'NOT met'}")
    return 0 if ok else 2


if __name__ == "__main__":
    sys.exit(main())

"""How good is perfkit tune's pick, and how cheaply? An exhaustive grid vs the Optuna search.

Two scenarios, each on a private copy of a fixture model, with a latency budget that rules
out the extremes:

- `hungry` (default): a batch-hungry model whose best config lies outside its starting one
  (it starts at max_batch_size 8, no dynamic batching, 1 instance; a large fixed cost per
  execution makes big batches pay), p99 <= 100 ms. The grid covers max_batch_size
  {8, 16, 32, 64, 128} x instances {1, 2} x dynamic batching off / on with a queue delay of
  1, 2, 4 or 8 ms (50 configs); perfkit tune searches a wider space (queue delay 0.5..10 ms,
  up to 3 instances) with at most 25 trials.
  Goal: >= 95% of the grid best's throughput within 25 trials and 10 minutes.
- `batcher`: the original 36-config space (max_batch_size {4, 8} x dynamic batching x
  instances {1, 2, 3} x fp32/fp16/int8), perfkit tune with 25% of the grid's trials.

Both picks are re-measured in the same run, alternating, with the same load search, and
the script prints the throughput ratio, trials, wall time and the split of trial time
between reload and measurement (and how many load levels a trial measured).

    .venv/bin/python benchmarks/tune_quality.py                    # hungry, ~15 min on 2 cores (grid ~8 min)
    .venv/bin/python benchmarks/tune_quality.py --quick            # hungry, smaller grid (15 configs), ~5 min
    .venv/bin/python benchmarks/tune_quality.py --model batcher    # the batcher scenario
"""

from __future__ import annotations

import argparse
import math
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from perfkit.measure import profile
from perfkit.server import LocalLaunch, launch_local
from perfkit.server.modelconfig import ConfigGuard, read_config
from perfkit.tuner import Budget, TuneResult, TuneSettings, TuneSpace, grid_points, judge_trial, resolve, tune
from perfkit.tuner.parts import find_load

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Scenario:
    model: str
    budget_ms: float
    max_concurrency: int
    grid: TuneSpace
    search: TuneSpace
    trials: int | None  # None: 25% of the grid's
    max_wall_s: float | None


def _scenario(name: str, quick: bool) -> Scenario:
    if name == "hungry":
        return Scenario(
            model="hungry",
            budget_ms=100.0,
            max_concurrency=256,
            grid=TuneSpace(
                max_batch_sizes=(8, 32, 64) if quick else (8, 16, 32, 64, 128),
                queue_delay_us=(2000, 8000) if quick else (1000, 8000),  # the grid takes 4 log-spaced values
                preferred_batch_sizes=("none",),
                instance_counts=(1,) if quick else (1, 2),
                precisions=("fp32",),
            ),
            search=TuneSpace(
                max_batch_sizes=(8, 16, 32, 64, 128),
                queue_delay_us=(500, 10000),
                preferred_batch_sizes=("none",),
                instance_counts=(1, 2, 3),
                precisions=("fp32",),
            ),
            trials=10 if quick else 25,
            max_wall_s=600.0,
        )
    space = TuneSpace(
        max_batch_sizes=(4, 8),
        queue_delay_us=(2000, 2000),
        preferred_batch_sizes=("none",),
        instance_counts=(1, 2) if quick else (1, 2, 3),
        precisions=("fp32", "int8") if quick else ("fp32", "fp16", "int8"),
    )
    return Scenario("batcher", 12.0, 16, space, space, None, None)


def _settings(sc: Scenario, out: Path, trials: int, sampler: str, seed: int, adaptive: bool = True) -> TuneSettings:
    return TuneSettings(
        model=sc.model,
        budget=Budget(sc.budget_ms),
        trials=trials,
        output_dir=out,
        sampler=sampler,  # type: ignore[arg-type]  # argparse gives str; the values are the Literal's
        seed=seed,
        max_concurrency=sc.max_concurrency,
        measurement_interval_ms=300,
        adaptive_load=adaptive,
        search="measure",  # as every run recorded here (predict_quality.py measures --search predict)
        load="concurrency",  # the grid and the re-measurements here are closed loop (tune_claims.py: both)
    )


def _time_split(result: TuneResult) -> tuple[int, float, float, float, float]:
    measured = [t for t in result.record.trials if "reload_s" in t.metrics and "duplicate_of" not in t.metrics]
    if not measured:
        return 0, 0.0, 0.0, 0.0, 0.0
    reload_s = statistics.mean(t.metrics["reload_s"] for t in measured)
    measure_s = statistics.mean(t.metrics["measure_s"] for t in measured)
    total_s = statistics.mean(t.duration_s for t in measured)
    levels = statistics.mean(t.metrics.get("levels_measured", 0.0) for t in measured)
    return len(measured), reload_s, measure_s, total_s, levels


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=("hungry", "batcher"), default="hungry")
    ap.add_argument("--budget-ms", type=float, help="p99 budget (default: the scenario's)")
    ap.add_argument("--quick", action="store_true", help="a smaller grid and fewer trials (a smoke run)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=2, help="re-measurement rounds of each pick")
    ap.add_argument(
        "--load-search",
        choices=("adaptive", "doubling"),
        default="adaptive",
        help="how trials find their highest load within budget: gallop and bisect from similar trials' load "
        "with early-decided levels (perfkit's default), or every level from concurrency 1 by doubling "
        "(the earlier behaviour, for comparison)",
    )
    args = ap.parse_args()
    sc = _scenario(args.model, args.quick)
    if args.budget_ms:
        sc = Scenario(sc.model, args.budget_ms, sc.max_concurrency, sc.grid, sc.search, sc.trials, sc.max_wall_s)

    work = Path(tempfile.mkdtemp(prefix="perfkit-tune-bench-"))
    repo = work / "models"
    shutil.copytree(
        ROOT / "fixtures" / "models" / sc.model, repo / sc.model, ignore=shutil.ignore_patterns("__pycache__")
    )
    cfg_path = repo / sc.model / "config.pbtxt"
    original = cfg_path.read_bytes()
    budget_us = sc.budget_ms * 1e3
    grid_space = resolve(sc.grid, read_config(cfg_path), repo / sc.model, latency_budget_us=budget_us)
    search_space = resolve(sc.search, read_config(cfg_path), repo / sc.model, latency_budget_us=budget_us)
    grid_n = math.prod(len(v) for v in grid_points(grid_space).values())
    tune_n = sc.trials or max(1, math.floor(0.25 * grid_n))
    head = f"{sc.model}: p99 <= {sc.budget_ms:g} ms, concurrency up to {sc.max_concurrency}"
    print(f"{head}, {args.load_search} load search")
    print(f"grid ({grid_n} points): {', '.join(d.describe() for d in grid_space.dimensions)}")
    print(f"perfkit tune ({tune_n} trials): {', '.join(d.describe() for d in search_space.dimensions)}")

    with launch_local(LocalLaunch(repo, models=(sc.model,))) as server:
        t0 = time.monotonic()
        adaptive = args.load_search == "adaptive"
        grid = tune(server, _settings(sc, work / "grid", grid_n, "grid", args.seed, adaptive), sc.grid,
                    model_repository=repo)  # fmt: skip
        grid_wall = time.monotonic() - t0
        t0 = time.monotonic()
        tuned = tune(server, _settings(sc, work / "tune", tune_n, "auto", args.seed, adaptive), sc.search,
                     model_repository=repo, echo=print)  # fmt: skip
        tune_wall = time.monotonic() - t0
        assert cfg_path.read_bytes() == original, "the tuner did not restore the config"
        g_best, t_best = grid.best, tuned.best
        if g_best is None or t_best is None:
            print("no feasible config: lower the load or raise --budget-ms")
            return 1
        picks = {"grid": (grid.record.best_config or "", g_best), "perfkit": (tuned.record.best_config or "", t_best)}
        js = _settings(sc, work / "x", 1, "auto", 0).trial_load_settings(None)
        again: dict[str, list[float]] = {"grid": [], "perfkit": []}
        with ConfigGuard(cfg_path, server, sc.model) as guard:
            for _ in range(args.rounds):
                for label, (text, pick) in picks.items():
                    guard.apply(text)
                    start = int(pick.load.value) if pick.load else None
                    rec = find_load(profile, server, js, sc.model, start)
                    v = judge_trial(rec, latency_budget_ms=sc.budget_ms, percentile=99)
                    again[label].append(v.throughput_infer_per_s or 0.0)
    shutil.rmtree(work, ignore_errors=True)

    g_n, g_reload, g_meas, g_total, g_levels = _time_split(grid)
    t_n, t_reload, t_meas, t_total, t_levels = _time_split(tuned)
    g_re, t_re = statistics.mean(again["grid"]), statistics.mean(again["perfkit"])
    ratio = t_re / g_re if g_re else 0.0
    print()
    print(f"grid best     trial {g_best.number:>3} {g_best.params}: {g_best.throughput_infer_per_s:.0f}/s in the grid")
    print(f"perfkit pick  trial {t_best.number:>3} {t_best.params}: {t_best.throughput_infer_per_s:.0f}/s in its run")
    same = " (same config)" if g_best.config_pbtxt_sha256 == t_best.config_pbtxt_sha256 else ""
    print(f"re-measured ({args.rounds} rounds, alternating): grid best {g_re:.0f}, perfkit {t_re:.0f} infer/s"
          f" -> {100 * ratio:.1f}% of the grid's best{same}")  # fmt: skip
    print(f"trials: grid {g_n}, perfkit {t_n}")
    print(f"wall: grid {grid_wall:.0f} s, perfkit {tune_wall:.0f} s")
    print(f"per trial: grid {g_total:.1f} s (reload {g_reload:.1f} s, measure {g_meas:.1f} s, "
          f"{g_levels:.1f} levels); perfkit {t_total:.1f} s (reload {t_reload:.1f} s, "
          f"measure {t_meas:.1f} s, {t_levels:.1f} levels)")  # fmt: skip
    if sc.max_wall_s is not None:
        ok = ratio >= 0.95 and t_n <= tune_n and tune_wall <= sc.max_wall_s
        goal = f">= 95% within {tune_n} trials and {sc.max_wall_s / 60:g} minutes"
    else:
        ok = ratio >= 0.95 and t_n <= 0.25 * g_n
        goal = ">= 95% with <= 25% of the grid's trials"
    print(f"goal {goal}: {'met' if ok else 'NOT met'}")
    return 0 if ok else 2


if __name__ == "__main__":
    sys.exit(main())

"""Does `perfkit tune --search predict` pick as well as an exhaustive grid, with a claim that holds,
in minutes? Per subject, in one run against one server: an exhaustive grid of a small space
measured by the real perf_analyzer, the predicted search and today's measured search on the same
space and budget, each search's claimed best re-measured by perf_analyzer, and every config's
predicted sustainable rate against the grid's.

Subjects (private copies of the fixtures, open loop, Poisson arrivals, p99 budget):
- `hungry`: batch-hungry, an emulated device shared by its instances (30 ms a batch + 0.3 ms an
  item), p99 <= 100 ms; max_batch_size {8, 32, 64, 128} x dynamic batching (4 ms) x 1-2 instances.
- `onnx_mlp`: an MLP run by onnxruntime (real arithmetic on the 2 cores), p99 <= 20 ms;
  max_batch_size {8, 32, 128} x dynamic batching (1 ms) x 1-2 instances.
- `stages`: the three-step ensemble, p99 <= 100 ms end to end; dynamic batching (2 ms, max batch
  8) on or off per step. The predicted search of a pipeline is refused where it is not yet
  supported: the run records the refusal and measures the rest.

The grid: each config loaded, then perf_analyzer (gRPC: over HTTP 2.60.0 can hang on an open-loop
level above capacity, docs/benchmarks.md) at request rates with `--request-rate-range R`
(Poisson, 3 windows): galloping by 1.5x from the predicted rate (only a starting point), then
bisecting to 5%; a level holds when its p99 is within the budget and it completed >= 95% of the
rate asked. Request rate rather than concurrency because the searches' figure is a sustainable
arrival rate (open loop); a config's figure is the throughput of its highest level held.
Configs with dynamic batching off differ only in max_batch_size, which batch-1 requests without a
batcher never use: they are measured once per instance count.

    PYTHONPATH=. .venv/bin/python benchmarks/predict_quality.py                    # all three, ~1 h
    PYTHONPATH=. .venv/bin/python benchmarks/predict_quality.py --subjects hungry,onnx_mlp
    PYTHONPATH=. .venv/bin/python benchmarks/predict_quality.py --quick --subjects hungry   # smoke run
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._anchor import add_version_flag, perf_analyzer, use_version  # noqa: E402
from benchmarks._quality_figures import markdown, prediction_errors, search_figures, sustainable  # noqa: E402
from perfkit import predict  # noqa: E402
from perfkit.errors import PerfkitError  # noqa: E402
from perfkit.server import LocalLaunch, launch_local  # noqa: E402
from perfkit.server.local import LocalServer  # noqa: E402
from perfkit.server.modelconfig import apply_config, parse_config, render_config  # noqa: E402
from perfkit.tuner import TuneResult, TuneSettings, TuneSpace, tune  # noqa: E402
from perfkit.tuner._pipeline import unbundle  # noqa: E402
from perfkit.tuner._predict import SIM_REQUESTS  # noqa: E402
from perfkit.tuner._space import P_COUNT, P_DB, P_MBS  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
STEPS = ("stage_decode", "stage_infer", "stage_post")

# Below this rate perf_analyzer's 1 s windows hold too few requests: seen at load 8-10, levels at
# 1-4 req/s ran past 48 s and 6.4 req/s read 3.0 completed. Not measured; a config that holds no
# level above it counts 0.
MIN_RPS = 5.0

Variant = tuple[int, bool, int]  # max_batch_size, dynamic batching, instances


@dataclass(frozen=True)
class Subject:
    name: str
    kind: str  # "model" or "pipeline"
    budget_ms: float
    delay_us: int
    space: TuneSpace
    grid: tuple[dict[str, Variant], ...]  # each config: a variant per model it edits


def _model_grid(model: str, sizes: tuple[int, ...], counts: tuple[int, ...], orig_mbs: int) -> tuple:
    return tuple({model: v} for c in counts for v in [(orig_mbs, False, c), *((m, True, c) for m in sizes)])


def subject(name: str, quick: bool) -> Subject:
    """The subject's budget, space and grid (the space the searches get is the grid's)."""
    if name == "hungry":
        sizes, counts = ((8, 64), (1,)) if quick else ((8, 32, 64, 128), (1, 2))
        space = TuneSpace(max_batch_sizes=sizes, queue_delay_us=(4000, 4000), preferred_batch_sizes=("none",),
                          instance_counts=counts, precisions=("fp32",))  # fmt: skip
        return Subject(name, "model", 100.0, 4000, space, _model_grid(name, sizes, counts, 8))
    if name == "onnx_mlp":
        sizes, counts = ((8, 32), (1,)) if quick else ((8, 32, 128), (1, 2))
        space = TuneSpace(max_batch_sizes=sizes, queue_delay_us=(1000, 1000), preferred_batch_sizes=("none",),
                          instance_counts=counts)  # fmt: skip
        return Subject(name, "model", 20.0, 1000, space, _model_grid(name, sizes, counts, 32))
    if name == "stages":
        on_off = ((False, True),) * 3 if not quick else ((False,), (False, True), (False, True))
        grid = tuple(
            {s: (8, db, 1) for s, db in zip(STEPS, dbs, strict=True)}
            for dbs in [(a, b, c) for a in on_off[0] for b in on_off[1] for c in on_off[2]]
        )
        space = TuneSpace(max_batch_sizes=(8,), queue_delay_us=(2000, 2000), preferred_batch_sizes=("none",),
                          instance_counts=(1,))  # fmt: skip
        return Subject(name, "pipeline", 100.0, 2000, space, grid)
    raise SystemExit(f"--subjects: {name!r} unknown; choose from hungry, onnx_mlp, stages")


def key(config: dict[str, Variant]) -> str:
    """A config's name in the tables: dynamic batching off names no max_batch_size (unused)."""
    parts = []
    for model, (mbs, db, count) in sorted(config.items(), key=lambda kv: STEPS.index(kv[0]) if kv[0] in STEPS else 0):
        what = f"mbs {mbs} batching" if db else "no batching"
        head = f"{model.removeprefix('stage_')}: " if len(config) > 1 else ""
        parts.append(f"{head}{what}" + (f" x{count}" if len(config) == 1 else ""))
    return "; ".join(parts)


def variant_of(text: str) -> Variant:
    cfg = parse_config(text)
    count = cfg.instance_group[0].count if len(cfg.instance_group) else 1
    return int(cfg.max_batch_size), cfg.HasField("dynamic_batching"), int(count or 1)


def variant_text(original: str, v: Variant, delay_us: int) -> str:
    mbs, db, count = v
    cfg = parse_config(original)
    cfg.max_batch_size = mbs
    if db:
        cfg.dynamic_batching.max_queue_delay_microseconds = delay_us
    else:
        cfg.ClearField("dynamic_batching")
    cfg.instance_group[0].count = count
    return render_config(original, cfg)


def pick_texts(result: TuneResult, model: str, kind: str) -> dict[str, str]:
    """The pick's config text per model (a pipeline's record holds them bundled)."""
    text = result.record.best_config or ""
    return unbundle(text) if kind == "pipeline" else {model: text}


def put(server: LocalServer, repo: Path, texts: dict[str, str], ensemble: str | None) -> None:
    for m, text in texts.items():
        if m in STEPS or ensemble is None:
            apply_config(server, m, repo / m / "config.pbtxt", text)
    if ensemble is not None:
        server.load_model(ensemble)


def pa_level(server: LocalServer, model: str, rate: float, seconds: float) -> tuple[float, float]:
    """perf_analyzer at one Poisson request rate over gRPC, 3 windows (its stability check off: -s 1000;
    with -s 100 short windows at low rates end "Failed to obtain stable measurement"): (throughput/s, p99 ms)."""
    binary, env = perf_analyzer()
    window_ms = str(int(seconds * 1000 / 3))
    cmd = [str(binary), "-m", model, "-u", str(server.endpoints.grpc_url), "-i", "grpc", "--request-rate-range",
           f"{rate:.6g}", "--request-distribution", "poisson", "--max-threads", "256", "--percentile=99",
           "--measurement-interval", window_ms, "-r", "3", "-s", "1000"]  # fmt: skip
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env}, timeout=seconds * 6 + 30)
    except subprocess.TimeoutExpired:
        print(f"    perf_analyzer at {rate:.0f}/s did not finish", flush=True)
        return 0.0, math.inf
    out = done.stdout + done.stderr
    tput, p99 = re.findall(r"Throughput: ([0-9.]+) infer/sec", out), re.findall(r"p99 latency: ([0-9.]+) usec", out)
    if not tput or not p99:
        print(f"    perf_analyzer at {rate:.0f}/s gave no figure: {out.strip().splitlines()[-1:]}", flush=True)
        return 0.0, math.inf
    return float(tput[-1]), float(p99[-1]) / 1e3


def pa_sustainable(server: LocalServer, model: str, start: float, budget_ms: float, seconds: float) -> dict:
    def measure(rate: float) -> tuple[float, float]:
        t, p = pa_level(server, model, rate, seconds)
        print(f"    {rate:8.1f}/s -> {t:8.1f}/s p99 {p:6.1f} ms", flush=True)
        return t, p

    best, levels = sustainable(measure, start, budget_ms, min_rps=MIN_RPS)
    return {"rps": best, "levels": [lv.__dict__ for lv in levels]}


def load_avg() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def predicted_rates(sub: Subject, pred: TuneResult) -> dict[str, float]:
    """Each grid config's predicted rate: the predicted tune's own figure where it has one for the
    config, perfkit.predict with the tune's calibration for the rest."""
    cal = pred.record.calibration
    if cal is None or sub.kind != "model":
        out = {}
        for t in pred.record.trials:
            if "predicted_rps" in t.metrics and sub.kind == "model":
                out[key(_trial_config(sub, t.params))] = t.metrics["predicted_rps"]
        return out
    sm, ct = predict.service_model(cal), predict.contention(cal)
    out = {}
    for config in sub.grid:
        ((mbs, db, count),) = config.values()
        cfg = predict.BatcherConfig(mbs, db, (), float(sub.delay_us) if db else 0.0, count)
        r = predict.sustainable_rate(
            cfg, sm, sub.budget_ms * 1e3, percentile=99.0, contention=ct, requests=SIM_REQUESTS
        )
        out[key(config)] = r.rate_rps
    for t in pred.record.trials:  # the tune's own figures where it predicted the config
        if "predicted_rps" in t.metrics:
            out[key(_trial_config(sub, t.params))] = t.metrics["predicted_rps"]
    return out


def _trial_config(sub: Subject, params: dict[str, Any]) -> dict[str, Variant]:
    ((model, (mbs0, _, _)),) = sub.grid[0].items()
    mbs = int(params.get(P_MBS, mbs0))
    return {model: (mbs, bool(params.get(P_DB, False)), int(params.get(P_COUNT, 1)))}


def run_search(server: LocalServer, repo: Path, work: Path, sub: Subject, search: str, args: argparse.Namespace,
               originals: dict[str, str]) -> tuple[dict[str, Any], TuneResult | None]:  # fmt: skip
    model = "stages" if sub.kind == "pipeline" else sub.name
    settings = TuneSettings(model=model, latency_budget_ms=sub.budget_ms, trials=args.trials,
                            max_time_s=args.max_time_s, output_dir=work / search, load="rate",
                            search=search, seed=args.seed)  # type: ignore[arg-type]  # the Literal's values  # fmt: skip
    print(f"\n[{sub.name}] perfkit tune --search {search} (load average {load_avg()})", flush=True)
    t0 = time.monotonic()
    try:
        result = tune(server, settings, sub.space, model_repository=repo, echo=lambda s: print(f"  {s}", flush=True))
    except PerfkitError as e:
        print(f"  refused: {e}", flush=True)
        return {"refused": str(e), "wall_s": time.monotonic() - t0}, None
    wall = time.monotonic() - t0
    best = result.best
    run: dict[str, Any] = {"wall_s": wall, "load_avg": load_avg()}
    run["trials"] = sum(1 for t in result.record.trials if "reload_s" in t.metrics and "duplicate_of" not in t.metrics)
    cal = result.record.calibration
    run["calibration"] = {k: v for k, v in cal.__dict__.items() if k != "points"} if cal else None
    if cal is not None:
        run["calibration_points"] = [(p.batch_size, p.executions, p.service_us) for p in cal.points]
    if best is None:
        return {**run, "pick": None}, result
    c = best.confirmation
    claim, at = ((c.throughput_infer_per_s, c.load) if c is not None and c.held else
                 (best.throughput_infer_per_s, best.load))  # fmt: skip
    texts = pick_texts(result, model, sub.kind)
    pick = {m: variant_of(t) for m, t in texts.items() if (m in STEPS) == (sub.kind == "pipeline")}
    run.update(pick=key(pick), claim_rps=claim, claim_at_rps=at.value if at else None, params=best.params)
    print(f"  re-measuring the pick ({run['pick']}, claim {claim:.0f}/s) with perf_analyzer", flush=True)
    put(server, repo, texts, model if sub.kind == "pipeline" else None)
    again = pa_sustainable(server, model, claim or 10.0, sub.budget_ms, args.level_s)
    put(server, repo, originals, model if sub.kind == "pipeline" else None)
    run.update(remeasured_rps=again["rps"], remeasure_levels=again["levels"])
    return run, result


def run_subject(name: str, args: argparse.Namespace, out: dict[str, Any], save: Callable[[], None]) -> None:
    """Measure one subject into `out` (saved after each phase, so an interrupted run keeps its figures)."""
    sub = subject(name, args.quick)
    work = Path(tempfile.mkdtemp(prefix=f"perfkit-predict-quality-{name}-"))
    repo = work / "models"
    models = ("stages", *STEPS) if sub.kind == "pipeline" else (name,)
    for m in models:
        if m == "onnx_mlp":
            sys.path.insert(0, str(ROOT / "tests"))
            from onnx_model import add_onnx_model

            add_onnx_model(repo)
        else:
            shutil.copytree(ROOT / "fixtures" / "models" / m, repo / m, ignore=shutil.ignore_patterns("__pycache__"))
    originals = {m: (repo / m / "config.pbtxt").read_text() for m in models if m != "stages"}
    model = "stages" if sub.kind == "pipeline" else name
    out.update(subject=name, kind=sub.kind, budget_ms=sub.budget_ms, searches={}, load_avg_start=load_avg())
    with launch_local(LocalLaunch(repo, models=(model,))) as server:
        results: dict[str, TuneResult | None] = {}
        for search in ("predict", "measure"):
            out["searches"][search], results[search] = run_search(server, repo, work, sub, search, args, originals)
            save()
        pred = results["predict"]
        out["predicted"] = predicted_rates(sub, pred) if pred is not None else {}
        print(f"\n[{name}] grid: {len(sub.grid)} configs by perf_analyzer (load average {load_avg()})", flush=True)
        t0 = time.monotonic()
        grid: dict[str, float] = {}
        levels: dict[str, list] = {}
        for config in sub.grid:
            k = key(config)
            texts = {m: variant_text(originals[m], v, sub.delay_us) for m, v in config.items()}
            put(server, repo, texts, model if sub.kind == "pipeline" else None)
            start = out["predicted"].get(k) or args.start_rps
            print(f"  {k} (start {start:.0f}/s)", flush=True)
            r = pa_sustainable(server, model, start, sub.budget_ms, args.level_s)
            grid[k], levels[k] = r["rps"], r["levels"]
            out.update(grid=grid, grid_levels=levels)
            save()
        put(server, repo, originals, model if sub.kind == "pipeline" else None)
        out.update(grid=grid, grid_levels=levels, grid_wall_s=time.monotonic() - t0, load_avg=load_avg())
    shutil.rmtree(work, ignore_errors=True)
    out["errors"] = prediction_errors(out["predicted"], grid)
    out["figures"] = {s: search_figures(r, grid, sub.kind) for s, r in out["searches"].items()}
    save()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subjects", default="hungry,onnx_mlp,stages", help="comma-separated: hungry, onnx_mlp, stages")
    ap.add_argument("--quick", action="store_true", help="a smaller grid, shorter levels (a smoke run)")
    ap.add_argument("--trials", type=int, default=20, help="each search's --trials (default: perfkit tune's, 20)")
    ap.add_argument("--max-time-s", type=float, default=600.0, help="each search's --max-time")
    ap.add_argument("--level-s", type=float, default=3.0, help="seconds of each perf_analyzer level (3 windows)")
    ap.add_argument("--start-rps", type=float, default=100.0, help="the grid's first rate where none is predicted")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results", help="folder for the JSON and table")
    ap.add_argument("--table", type=Path, help="print the table of a saved JSON (an interrupted run's too) and exit")
    add_version_flag(ap)
    args = ap.parse_args()
    if args.table:
        saved = json.loads(args.table.read_text())["subjects"]
        for s in saved:
            grid = s.get("grid", {})
            s["errors"] = prediction_errors(s.get("predicted", {}), grid)
            s["figures"] = {n: search_figures(r, grid, s.get("kind", "model")) for n, r in s["searches"].items()}
        print(markdown(saved))
        return 0
    if args.quick:
        args.trials, args.level_s, args.max_time_s = min(args.trials, 6), min(args.level_s, 2.0), 120.0
    version = use_version(args.pa_version)
    perf_analyzer()
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H%MZ")
    meta = {"date": stamp, "perf_analyzer": version, "quick": args.quick, "cpus": os.cpu_count(), "argv": sys.argv[1:]}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"predict_quality-{stamp}{'-quick' if args.quick else ''}"
    subjects: list[dict[str, Any]] = []

    def save() -> None:
        path.with_suffix(".json").write_text(json.dumps({**meta, "subjects": subjects}, indent=1, default=str))

    for name in [s.strip() for s in args.subjects.split(",") if s.strip()]:
        subjects.append({"subject": name, "pa_version": version})
        run_subject(name, args, subjects[-1], save)
    table = markdown(subjects)
    path.with_suffix(".md").write_text(table + "\n")
    print("\n" + table)
    ok = all(all(f.get("goals", {}).values()) for s in subjects for n, f in s["figures"].items() if n == "predict")
    print(f"--search predict goals {'met' if ok else 'NOT all met'} (pick >= 0.95x grid best, claim within 10%,"
          " <= 2 min a model / 4 a pipeline)")  # fmt: skip
    return 0 if ok else 2


if __name__ == "__main__":
    sys.exit(main())

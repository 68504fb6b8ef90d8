"""Does `perfkit tune --search predict` pick as well as an exhaustive grid, with a claim that holds,
in minutes? Per subject, in one run against one server: an exhaustive grid of a small space
measured by the real perf_analyzer, the predicted search and today's measured search on the same
space and budget (both over gRPC, as the grid), each search's claimed best re-measured by
perf_analyzer, and every config's predicted sustainable rate against the grid's. --phases sets the
order of the three phases (predict, grid, measure; default in that order); the JSON records it.

Subjects (private copies of the fixtures, open loop, Poisson arrivals, p99 budget):
- `hungry`: batch-hungry, an emulated device shared by its instances (30 ms a batch + 0.3 ms an
  item), p99 <= 150 ms (HUNGRY_BUDGET_MS; at 100 ms many configs hold no rate at all: a batch of
  one executes in 31-35 ms, and waits about as long again on a shared 2-core machine);
  max_batch_size {8, 32, 64, 128} x dynamic batching (4 ms) x 1-2 instances.
- `onnx_mlp`: an MLP (64 -> 2048 -> 2048 -> 64, ONNX_WIDTHS) run by onnxruntime (real arithmetic
  on the 2 cores), p99 <= 20 ms;
  max_batch_size {8, 32, 128} x dynamic batching (1 ms) x 1-2 instances.
- `stages`: the three-step ensemble, p99 <= 100 ms end to end; dynamic batching (2 ms, max batch
  8) on or off per step.
A search that raises (refuses the subject, or --max-time ran out before any trial) is recorded
with why, and with its calibration where it made one; the other phases go on.

The grid: each config loaded, then perf_analyzer (gRPC: over HTTP 2.60.0 can hang on an open-loop
level above capacity, docs/benchmarks.md) at request rates with `--request-rate-range R` (Poisson,
asynchronous requests from 16 threads, 3 windows of at least WINDOW_REQUESTS requests each;
first a 2 s warm-up at the first rate that is not counted, as perfkit's first measurement after a
reload warms up, and before each level a wait until the server has finished what earlier levels
queued: benchmarks/_pa_rate.py):
galloping by 1.5x (up to 16 steps) from the config's prediction (only a starting point: the
predicted search's own figure, else the simulator's with its calibration; --start-rps when the
grid runs before the predicted search), then bisecting to 5%; a level holds when its p99 is within
the budget and it completed >= 90% of the rate asked (HELD_RATE_FRACTION). Request rate rather
than concurrency because the searches' figure is a sustainable arrival rate (open loop); a
config's figure is the throughput of its highest level held, and held again when measured once
more (benchmarks/_pa_rate.py RECHECKS). A search's claim is re-measured the same way with levels
of --remeasure-level-s (15 s: as long as the claim's own confirmation, 3 runs of 5 s), galloping
by 1.2x from the claim (REMEASURE_FACTOR: 15 s levels far above capacity bloat the server). Once the
phases are done, the grid's best config and each search's pick that differs from it are
re-measured one after the other the same way (side by side): the pick's goal is judged there,
against the best config rather than the best reading of the grid's pass
(benchmarks/_quality_figures.py search_figures).
Configs with dynamic batching off differ only in max_batch_size, which batch-1 requests without a
batcher never use: they are measured once per instance count.

    PYTHONPATH=. .venv/bin/python benchmarks/predict_quality.py                    # all three, ~1 h
    PYTHONPATH=. .venv/bin/python benchmarks/predict_quality.py --subjects hungry,onnx_mlp
    PYTHONPATH=. .venv/bin/python benchmarks/predict_quality.py --quick --subjects hungry   # smoke run
    PYTHONPATH=. .venv/bin/python benchmarks/predict_quality.py --phases grid,predict   # grid first, no measured search
    PYTHONPATH=. .venv/bin/python benchmarks/predict_quality.py --server-cpus 0   # clients off the server's CPU
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._anchor import add_version_flag, perf_analyzer, use_version  # noqa: E402
from benchmarks._cpus import parse_cpus, pin_apart  # noqa: E402
from benchmarks._loadgen import CLAIM_TOLERANCE, DEFAULT_MIN_DURATION_S, second_judge  # noqa: E402
from benchmarks._pa_rate import REMEASURE_FACTOR, WINDOW_REQUESTS, pa_sustainable  # noqa: E402
from benchmarks._quality_figures import goals_met, grid_best, markdown, prediction_errors, search_figures  # noqa: E402
from perfkit import predict  # noqa: E402
from perfkit.errors import PerfkitError  # noqa: E402
from perfkit.records import (
    Budget,  # noqa: E402
    Calibration,  # noqa: E402
)
from perfkit.server import LocalLaunch, Server, launch_local  # noqa: E402
from perfkit.server.modelconfig import apply_config, parse_config, render_config  # noqa: E402
from perfkit.tuner import (  # noqa: E402
    TuneEvent,  # noqa: E402
    TuneResult,
    TuneSettings,
    TuneSpace,
    tune,
)
from perfkit.tuner.parts import (  # noqa: E402
    P_COUNT,
    P_DB,
    P_MBS,
    PREDICTED_ATTR,
    SIM_REQUESTS,
    Calibrated,
    PipelineCalibrated,
    split,
    unbundle,
)

ROOT = Path(__file__).resolve().parent.parent
STEPS = ("stage_decode", "stage_infer", "stage_post")

PHASES = ("predict", "grid", "measure")
HUNGRY_BUDGET_MS = 150.0  # see the module's docstring: at 100 ms many configs hold no rate at all
# onnx_mlp's layers (tests/support/onnx_model.py): hidden layers 2048 wide, not the tests' 1024, so that its
# configs hold rates where perf_analyzer's client has CPU to spare, and its batch sizes differ
# (4,523-6,783 req/s in the first such grid). With 1024 every batching config ended at the request
# path's ceiling, 9,000-13,000 req/s, where perf_analyzer 2.60.0 (76 us of CPU a request,
# benchmarks/onnx_client_share.py) spends 0.7-1.0 of its one CPU: three quiet grids named three
# different best configs (8,691, 10,142 and 13,119 req/s; benchmarks/results/history.md).
ONNX_WIDTHS = (64, 2048, 2048, 64)

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
    sizes: tuple[int, ...]
    counts: tuple[int, ...]
    if name == "hungry":
        sizes, counts = ((8, 64), (1,)) if quick else ((8, 32, 64, 128), (1, 2))
        space = TuneSpace(max_batch_sizes=sizes, queue_delay_us=(4000, 4000), preferred_batch_sizes=("none",),
                          instance_counts=counts, precisions=("fp32",))  # fmt: skip
        return Subject(name, "model", HUNGRY_BUDGET_MS, 4000, space, _model_grid(name, sizes, counts, 8))
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


def put(server: Server, repo: Path, texts: dict[str, str], ensemble: str | None) -> None:
    for m, text in texts.items():
        if m in STEPS or ensemble is None:
            apply_config(server, m, repo / m / "config.pbtxt", text)
    if ensemble is not None:
        server.load_model(ensemble)


def rss_mb(pid: int) -> float | None:
    """The server process's resident memory (MB), None where it cannot be read."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def load_avg() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def predicted_rates(sub: Subject, cal: Calibration | None, pred: TuneResult | None) -> dict[str, float]:
    """Each grid config's predicted rate: the predicted tune's own figure where it has one for the
    config, else the simulator's (perfkit.predict; a pipeline's end to end, its steps in series)
    with the tune's calibration (also where the tune ended without a result). Nothing for the
    rest where the tune calibrated nothing."""
    out: dict[str, float] = {}
    if cal is not None:
        for config in sub.grid:
            rate = _simulated_rps(sub, cal, config)
            if rate is not None:
                out[key(config)] = rate
    for t in pred.record.trials if pred is not None else ():  # the tune's own figures where it predicted the config
        if PREDICTED_ATTR in t.metrics:
            out[key(_trial_config(sub, t.params))] = t.metrics[PREDICTED_ATTR]
    return out


def search_measured(sub: Subject, pred: TuneResult | None) -> dict[str, float]:
    """Each config the predicted tune measured: the highest rate its search read (req/s). The grid
    starts no higher: a prediction 2.6x over a config's capacity (onnx_mlp) had perf_analyzer's
    asynchronous requests pile up in Triton's queue until the kernel killed the server (14 GB)."""
    out: dict[str, float] = {}
    for t in pred.record.trials if pred is not None else ():
        if t.throughput_infer_per_s:
            k = key(_trial_config(sub, t.params))
            out[k] = max(out.get(k, 0.0), float(t.throughput_infer_per_s))
    return out


def _batcher(sub: Subject, v: Variant) -> predict.BatcherConfig:
    mbs, db, count = v
    return predict.BatcherConfig(mbs, db, (), float(sub.delay_us) if db else 0.0, count)


def _simulated_rps(sub: Subject, cal: Calibration, config: dict[str, Variant]) -> float | None:
    budget_us = sub.budget_ms * 1e3
    if sub.kind == "model":
        ((v,),) = (config.values(),)
        r = predict.sustainable_rate(_batcher(sub, v), predict.service_model(cal), budget_us, percentile=99.0,
                                     contention=predict.contention(cal), requests=SIM_REQUESTS)  # fmt: skip
        return r.rate_rps
    by_step = {c.model: c for c in cal.steps}
    if any(m not in by_step for m in config):
        return None
    steps = [predict.PipelineStep(m, _batcher(sub, config[m]), predict.service_model(by_step[m]),
                                  predict.contention(by_step[m])) for m in STEPS]  # fmt: skip
    return predict.pipeline_rate(steps, budget_us, percentile=99.0, overhead_us=cal.overhead_us).rate_rps


def _trial_config(sub: Subject, params: dict[str, Any]) -> dict[str, Variant]:
    """A trial's params as a grid config (a knob the trial does not name: the original's)."""
    per = split(params) if sub.kind == "pipeline" else {next(iter(sub.grid[0])): params}
    out = {}
    for model, (mbs0, _, _) in sub.grid[0].items():  # the first config: the originals' knobs
        p = per.get(model, {})
        out[model] = (int(p.get(P_MBS, mbs0)), bool(p.get(P_DB, False)), int(p.get(P_COUNT, 1)))
    return out


def run_search(server: Server, repo: Path, work: Path, sub: Subject, search: str, args: argparse.Namespace,
               originals: dict[str, str]) -> tuple[dict[str, Any], TuneResult | None, Calibration | None]:  # fmt: skip
    """One search, timed, and its pick re-measured by perf_analyzer: its figures, its result (None
    where it raised) and its calibration (read from its events, so kept where it raised)."""
    model = "stages" if sub.kind == "pipeline" else sub.name
    cals: list[Calibration] = []

    def on_event(ev: TuneEvent) -> None:
        if isinstance(ev, (Calibrated, PipelineCalibrated)):
            cals.append(ev.cal)

    how: Literal["predict", "measure"] = "predict" if search == "predict" else "measure"
    settings = TuneSettings(model=model, budget=Budget(sub.budget_ms, 99.0), trials=args.trials,
                            max_time_s=args.max_time_s, output_dir=work / search, load="rate", protocol="grpc",
                            search=how, seed=args.seed)  # fmt: skip
    print(f"\n[{sub.name}] perfkit tune --search {search} (load average {load_avg()})", flush=True)
    t0 = time.monotonic()
    try:
        result = tune(server, settings, sub.space, model_repository=repo, on_event=on_event,
                      echo=lambda s: print(f"  {s}", flush=True))  # fmt: skip
    except PerfkitError as e:
        print(f"  refused: {e}", flush=True)
        refused = {"refused": str(e), "wall_s": time.monotonic() - t0, "load_avg": load_avg()}
        return {**refused, **_calibration(cals[-1] if cals else None)}, None, cals[-1] if cals else None
    wall = time.monotonic() - t0
    best = result.best
    cal = result.record.calibration or (cals[-1] if cals else None)
    run: dict[str, Any] = {"wall_s": wall, "load_avg": load_avg(), **_calibration(cal)}
    run["trials"] = sum(1 for t in result.record.trials if "reload_s" in t.metrics and "duplicate_of" not in t.metrics)
    if best is None:
        return {**run, "pick": None}, result, cal
    c = best.confirmation
    claim, at = ((c.throughput_infer_per_s, c.load) if c is not None and c.held else
                 (best.throughput_infer_per_s, best.load))  # fmt: skip
    texts = pick_texts(result, model, sub.kind)
    pick = {m: variant_of(t) for m, t in texts.items() if (m in STEPS) == (sub.kind == "pipeline")}
    run.update(pick=key(pick), claim_rps=claim, claim_at_rps=at.value if at else None, params=best.params)
    print(f"  re-measuring the pick ({run['pick']}, claim {claim or 0:.0f}/s) with perf_analyzer", flush=True)
    put(server, repo, texts, model if sub.kind == "pipeline" else None)
    again = pa_sustainable(server, model, claim or args.start_rps, sub.budget_ms, args.remeasure_level_s,
                           factor=REMEASURE_FACTOR)  # fmt: skip
    run.update(remeasured_rps=again["rps"], remeasure_levels=again["levels"])
    if args.loadgen_s > 0 and claim:
        # the second judge, on the same config: perf_analyzer holds the claim when its sustainable rate is
        # within 10% of it (search_figures' goal); LoadGen runs its Server scenario at the claim
        pa_held = again["rps"] >= (1 - CLAIM_TOLERANCE) * claim
        run["judges"] = second_judge(server.endpoints.grpc_url or "", model, claim, sub.budget_ms, pa_held,
                                     min_duration_s=args.loadgen_s)  # fmt: skip
        print(f"  {run['judges']['says']}", flush=True)
    put(server, repo, originals, model if sub.kind == "pipeline" else None)
    return run, result, cal


def _calibration(cal: Calibration | None) -> dict[str, Any]:
    if cal is None:
        return {"calibration": None}
    return {"calibration": {k: v for k, v in dataclasses.asdict(cal).items() if k != "points"},
            "calibration_points": [(p.batch_size, p.executions, p.service_us) for p in cal.points]}  # fmt: skip


def run_grid(server: Server, repo: Path, sub: Subject, originals: dict[str, str], args: argparse.Namespace,
             out: dict[str, Any], save: Callable[[], None]) -> None:  # fmt: skip
    """Every grid config by perf_analyzer, each from its prediction (--start-rps where none is
    predicted yet); saved after each config."""
    model = "stages" if sub.kind == "pipeline" else sub.name
    ensemble = model if sub.kind == "pipeline" else None
    print(f"\n[{sub.name}] grid: {len(sub.grid)} configs by perf_analyzer (load average {load_avg()})", flush=True)
    t0 = time.monotonic()
    grid: dict[str, float] = {}
    levels: dict[str, list] = {}
    starts: dict[str, float] = {}
    out.update(grid=grid, grid_levels=levels, grid_start_rps=starts)
    for config in sub.grid:
        k = key(config)
        put(server, repo, {m: variant_text(originals[m], v, sub.delay_us) for m, v in config.items()}, ensemble)
        measured = out.get("search_measured", {}).get(k)
        known = [r for r in (out["predicted"].get(k), measured) if r]
        starts[k] = min(known) if known else args.start_rps
        why = "--start-rps" if not known else "measured by the search" if starts[k] == measured else "predicted"
        print(f"  {k} (start {starts[k]:.0f}/s, {why})", flush=True)
        r = pa_sustainable(server, model, starts[k], sub.budget_ms, args.level_s)
        grid[k], levels[k] = r["rps"], r["levels"]
        save()
    put(server, repo, originals, ensemble)
    out.update(grid_wall_s=time.monotonic() - t0, load_avg=load_avg())


def side_by_side(server: Server, repo: Path, sub: Subject, originals: dict[str, str], args: argparse.Namespace,
                 out: dict[str, Any], save: Callable[[], None]) -> None:  # fmt: skip
    """The grid's best and each search's pick that differs from it, re-measured one after the other
    by perf_analyzer (levels of --remeasure-level-s, each from its grid figure), into
    out["side_by_side"]: the pick against the best config, not against the best reading of a pass."""
    grid: dict[str, float] = out.get("grid", {})
    best = grid_best(grid)
    picks = [r.get("pick") for r in out.get("searches", {}).values()]
    others = sorted({p for p in picks if p and p != best and p in grid})
    if best is None or not others:
        return
    model = "stages" if sub.kind == "pipeline" else sub.name
    ensemble = model if sub.kind == "pipeline" else None
    by_key = {key(config): config for config in sub.grid}
    print(f"\n[{sub.name}] side by side: the grid's best ({best}) and {', '.join(others)}", flush=True)
    side: dict[str, float] = {}
    out["side_by_side"] = side
    for k in (best, *others):
        put(server, repo, {m: variant_text(originals[m], v, sub.delay_us) for m, v in by_key[k].items()}, ensemble)
        side[k] = pa_sustainable(server, model, grid[k] or args.start_rps, sub.budget_ms, args.remeasure_level_s,
                                 factor=REMEASURE_FACTOR)["rps"]  # fmt: skip
        save()
    put(server, repo, originals, ensemble)


def run_subject(name: str, args: argparse.Namespace, out: dict[str, Any], save: Callable[[], None]) -> None:
    """Measure one subject into `out`, its phases in args.phases' order (saved after each phase and
    each grid config, so an interrupted run keeps its figures)."""
    sub = subject(name, args.quick)
    work = Path(tempfile.mkdtemp(prefix=f"perfkit-predict-quality-{name}-"))
    repo = work / "models"
    models = ("stages", *STEPS) if sub.kind == "pipeline" else (name,)
    for m in models:
        if m == "onnx_mlp":
            sys.path.insert(0, str(ROOT / "tests" / "support"))
            from onnx_model import add_onnx_model

            add_onnx_model(repo, widths=ONNX_WIDTHS)
        else:
            shutil.copytree(ROOT / "fixtures" / "models" / m, repo / m, ignore=shutil.ignore_patterns("__pycache__"))
    originals = {m: (repo / m / "config.pbtxt").read_text() for m in models if m != "stages"}
    model = "stages" if sub.kind == "pipeline" else name
    if name == "onnx_mlp":
        out["onnx_widths"] = list(ONNX_WIDTHS)
    out.update(subject=name, kind=sub.kind, budget_ms=sub.budget_ms, phases=list(args.phases), searches={},
               predicted={}, load_avg_start=load_avg())  # fmt: skip
    launched = launch_local(LocalLaunch(repo, models=(model,)))
    with launched as server:
        if args.server_cpus:
            clients = pin_apart(launched.pid, args.server_cpus)
            out["cpus"] = {"server": sorted(args.server_cpus), "clients": sorted(clients)}
            print(f"[{name}] server on CPUs {sorted(args.server_cpus)}, perfkit and perf_analyzer on {sorted(clients)}")
        for phase in args.phases:
            if phase == "grid":
                run_grid(server, repo, sub, originals, args, out, save)
            else:
                out["searches"][phase], result, cal = run_search(server, repo, work, sub, phase, args, originals)
                if phase == "predict":
                    out["predicted"] = predicted_rates(sub, cal, result)
                    out["search_measured"] = search_measured(sub, result)
            out.setdefault("server_rss_mb", {})[phase] = rss_mb(launched.pid)  # a bloated server reads slower
            save()
        if "grid" in args.phases:
            side_by_side(server, repo, sub, originals, args, out, save)
    shutil.rmtree(work, ignore_errors=True)
    grid = out.get("grid", {})
    out["errors"] = prediction_errors(out["predicted"], grid)
    side = out.get("side_by_side")
    out["figures"] = {s: search_figures(r, grid, sub.kind, side) for s, r in out["searches"].items()}
    save()


def parse_phases(text: str) -> tuple[str, ...]:
    """--phases: a comma-separated order of predict, grid and measure, each at most once."""
    phases = tuple(p.strip() for p in text.split(",") if p.strip())
    if not phases or any(p not in PHASES for p in phases) or len(set(phases)) != len(phases):
        raise argparse.ArgumentTypeError(f"{text!r}: give an order of {', '.join(PHASES)} (each at most once)")
    return phases


def _phases_line(phases: Any, server_cpus: Any = ()) -> str:
    apart = (f"The server on CPU(s) {', '.join(map(str, server_cpus))}, perfkit and perf_analyzer on the others.\n\n"
             if server_cpus else "")  # fmt: skip
    return (f"Phases, in order: {', '.join(phases)}.\n\n" if phases else "") + apart


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subjects", default="hungry,onnx_mlp,stages", help="comma-separated: hungry, onnx_mlp, stages")
    ap.add_argument("--phases", type=parse_phases, default=PHASES,
                    help="comma-separated order of predict, grid, measure (default: predict,grid,measure); a phase"
                         " left out is not run")  # fmt: skip
    ap.add_argument("--quick", action="store_true", help="a smaller grid, shorter levels (a smoke run)")
    ap.add_argument("--trials", type=int, default=20, help="each search's --trials (default: perfkit tune's, 20)")
    ap.add_argument("--max-time-s", type=float, default=600.0, help="each search's --max-time")
    level_help = f"seconds of a perf_analyzer level (3 windows, {WINDOW_REQUESTS} requests each at least)"
    ap.add_argument("--level-s", type=float, default=3.0, help=level_help)
    ap.add_argument("--remeasure-level-s", type=float, default=15.0,
                    help="seconds of a perf_analyzer level re-measuring a search's claim (default 15: as long"
                         " as the claim's confirmation, 3 runs of 5 s)")  # fmt: skip
    ap.add_argument("--loadgen-s", type=float, default=DEFAULT_MIN_DURATION_S,
                    help="MLPerf LoadGen's run checking each claim (seconds; 0: not run)")  # fmt: skip
    ap.add_argument("--start-rps", type=float, default=100.0, help="the grid's first rate where none is predicted")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--server-cpus", type=parse_cpus, default=frozenset(),
                    help="CPUs for the server (e.g. 0); perfkit and perf_analyzer run on the others (benchmarks/"
                         "_cpus.py); default: all share every CPU")  # fmt: skip
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results", help="folder for the JSON and table")
    ap.add_argument("--table", type=Path, help="print the table of a saved JSON (an interrupted run's too) and exit")
    add_version_flag(ap)
    args = ap.parse_args()
    if args.table:
        doc = json.loads(args.table.read_text())
        saved = doc["subjects"]
        for s in saved:
            grid = s.get("grid", {})
            s["errors"] = prediction_errors(s.get("predicted", {}), grid)
            side = s.get("side_by_side")
            s["figures"] = {
                n: search_figures(r, grid, s.get("kind", "model"), side) for n, r in s.get("searches", {}).items()
            }
        print(_phases_line(doc.get("phases"), doc.get("server_cpus", ())) + markdown(saved))
        return 0
    if args.quick:
        args.trials, args.level_s, args.max_time_s = min(args.trials, 6), min(args.level_s, 2.0), 120.0
        args.remeasure_level_s = min(args.remeasure_level_s, 2.0)
        args.loadgen_s = min(args.loadgen_s, 15.0)  # LoadGen's early stopping decides a p99 from ~700 queries
    version = use_version(args.pa_version)
    perf_analyzer()
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H%MZ")
    meta = {"date": stamp, "perf_analyzer": version, "quick": args.quick, "cpus": os.cpu_count(),
            "server_cpus": sorted(args.server_cpus), "phases": list(args.phases), "argv": sys.argv[1:]}  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"predict_quality-{stamp}{'-quick' if args.quick else ''}"
    subjects: list[dict[str, Any]] = []

    def save() -> None:
        path.with_suffix(".json").write_text(json.dumps({**meta, "subjects": subjects}, indent=1, default=str))

    for name in [s.strip() for s in args.subjects.split(",") if s.strip()]:
        subjects.append({"subject": name, "pa_version": version})
        run_subject(name, args, subjects[-1], save)
    table = _phases_line(args.phases, sorted(args.server_cpus)) + markdown(subjects)
    path.with_suffix(".md").write_text(table + "\n")
    print("\n" + table)
    if "predict" not in args.phases:
        print("--search predict not run (--phases)")
        return 0
    ok = all(goals_met(s["figures"]["predict"]) for s in subjects)
    print(f"--search predict goals {'met' if ok else 'NOT all met'} (pick >= 0.95x grid best, claim within 10%,"
          " <= 2 min a model / 4 a pipeline)")  # fmt: skip
    return 0 if ok else 2


if __name__ == "__main__":
    sys.exit(main())

"""Does `perfkit tune --search auto` predict every tune issue 52 names, pick as well as an exhaustive
perf_analyzer 2.60.0 grid, and claim what perf_analyzer holds? One invocation, each case on a
private copy of its fixtures:

- `batcher`: the demo's model, precision in the space (fp32, fp16), p99 <= 20 ms, open loop.
- `hungry`: batch-hungry on an emulated device its instances share, as shipped at fp32, fp16 twice
  as fast (the fixture's factor 0.5 on the device part), p99 <= 150 ms, open loop.
- `stages`: the three-step ensemble, precision (fp32, fp16) on its heavy step `stage_infer`,
  p99 <= 100 ms end to end, open loop.
- `mix`: `batcher` and `hungry` on one emulated device, 3:1, each held to its own budget.
- `closed`: the `queue` fixture under 16 closed-loop clients (--load concurrency), p99 <= 100 ms.
- `stream`: the decoupled `stream_held` under a TTFT p99 budget of 50 ms, open loop.
- `onnx_mlp`: an MLP run by onnxruntime (real arithmetic), p99 <= 20 ms, open loop.

Per case: the tune as a user runs it (`perfkit tune`, in process, its own server), which search
ran and why (the record's search and search_reason), its trials and wall time; then, on a fresh
server, every config of the tune's space (small by construction: the grid) measured by
perf_analyzer as the tune's load measures it (benchmarks/_case_levels.py: a Poisson rate galloped
from the config's prediction and bisected, a concurrency walk, one perf_analyzer per mix model, a
TTFT p99 from the profile export); each config's prediction (the predictor's own figure for it)
against that; the pick's figure over the grid's best; the claim (the confirmed figure) over the
pick re-measured by perf_analyzer with longer levels. The grid's configs are the tune's own
candidates (Subject.candidate), so the grid measures exactly what the tune would have loaded.

    PYTHONPATH=. .venv/bin/python benchmarks/predict_cases.py --quick                 # every case, small grids
    PYTHONPATH=. .venv/bin/python benchmarks/predict_cases.py --cases batcher,hungry  # a subset, full grids
    PYTHONPATH=. .venv/bin/python benchmarks/predict_cases.py --table results.json    # a saved run's table
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _case_levels as levels  # noqa: E402
from benchmarks._anchor import add_version_flag, perf_analyzer, use_version  # noqa: E402
from benchmarks._case_grid import Capture, applicable, grid_points, label  # noqa: E402
from benchmarks._loadgen import CLAIM_TOLERANCE, DEFAULT_MIN_DURATION_S, second_judge  # noqa: E402
from benchmarks._pa_rate import GRID_FACTOR, REMEASURE_FACTOR, WINDOW_REQUESTS  # noqa: E402
from benchmarks._quality_figures import goals_met, grid_best, judges_lines, prediction_errors, search_figures  # noqa: E402
from benchmarks.predict_quality import ONNX_WIDTHS  # noqa: E402
from perfkit.cli import main as perfkit_main  # noqa: E402
from perfkit.records import TuneRecord  # noqa: E402
from perfkit.server import LocalLaunch, launch_local  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MIX_WEIGHTS = {"batcher": 3, "hungry": 1}
MIX_BUDGETS_MS = {"batcher": 150.0, "hungry": 250.0}
MAX_CONCURRENCY = 16  # the closed case's --max-concurrency
STREAM_RESPONSES = 4  # stream_held's responses a request (fixtures/models/stream_held)
# --quick: a grid window's requests at least (benchmarks/_pa_rate.py's 100 otherwise). No fewer:
# perf_analyzer's throughput reads about 8 requests short a window with its 16 threads (117 sent in
# 3 windows of 4 s at 10 req/s read 8.12/s), so 40-request windows read 0.83 of the rate and a mix
# model's share never completed the 90% a level needs.
QUICK_WINDOW_REQUESTS = 100
# A stream's level holds at least 3 windows of this many streams: its TTFT p99 needs them (2 s levels
# read 29 ms at a rate whose 7.5 s runs read 50.3, and 47.6 ms at one M/D/3 puts at 273).
STREAM_WINDOW_REQUESTS = 300


@dataclass(frozen=True)
class Case:
    name: str
    goal: str  # "model" or "pipeline" (a pipeline's or a mix's wall-time goal)
    models: tuple[str, ...]  # the fixtures copied
    target: str  # the model perf_analyzer sends to
    load: str  # rate, closed, mix, stream
    budget_ms: float
    args: tuple[str, ...]  # perfkit tune's flags: the space is the grid
    quick: tuple[str, ...]  # the flags that shrink the space under --quick


COMMON = ("--preferred-batch-sizes", "none", "--measurement-interval", "500", "--seed", "0")
CASES = {
    c.name: c
    for c in (
        Case("batcher", "model", ("batcher",), "batcher", "rate", 20.0,
             ("-m", "batcher", "--latency-budget", "20ms", "--max-batch-sizes", "8,16", "--queue-delays-us", "1000",
              "--instance-counts", "1,2", "--precisions", "fp32,fp16", *COMMON),
             ("--max-batch-sizes", "8", "--instance-counts", "2")),
        Case("hungry", "model", ("hungry",), "hungry", "rate", 150.0,
             ("-m", "hungry", "--latency-budget", "150ms", "--max-batch-sizes", "8,64", "--queue-delays-us", "4000",
              "--instance-counts", "1,2", "--precisions", "fp32,fp16", *COMMON),
             ("--max-batch-sizes", "64", "--instance-counts", "2")),
        # no --precisions: given, it puts the knob on every python step; without it, precision is
        # searched (fp32, fp16) where a step's config holds the parameter: stage_infer's (prepare)
        Case("stages", "pipeline", ("stages", "stage_decode", "stage_infer", "stage_post"), "stages", "rate", 100.0,
             ("-m", "stages", "--latency-budget", "100ms", "--max-batch-sizes", "8", "--queue-delays-us", "2000",
              "--instance-counts", "1", *COMMON), ()),
        # --rate-limit-priorities 0: the rate limiter is a lever of its own, its priorities would
        # multiply the grid, and the grid's server runs without --rate-limit
        Case("mix", "pipeline", ("batcher", "hungry"), "batcher", "mix", 0.0,
             ("-m", "batcher", "-m", "hungry", "--mix", "batcher:3,hungry:1",
              "--latency-budget", "batcher:150ms,hungry:250ms", "--max-batch-sizes", "8", "--instance-counts", "1",
              "--queue-delays-us", "2000", "--precisions", "fp32", "--rate-limit-priorities", "0", *COMMON), ()),
        Case("closed", "model", ("queue",), "queue", "closed", 100.0,
             ("-m", "queue", "--load", "concurrency", "--max-concurrency", "16", "--instance-counts", "1,2,3",
              "--latency-budget", "100ms", *COMMON), ("--instance-counts", "1,2")),
        Case("stream", "model", ("stream_held",), "stream_held", "stream", 50.0,
             ("-m", "stream_held", "--load", "rate", "--latency-budget", "ttft:50ms", "--instance-counts", "1,2,3",
              *COMMON), ("--instance-counts", "1,3")),
        Case("onnx_mlp", "model", ("onnx_mlp",), "onnx_mlp", "rate", 20.0,
             ("-m", "onnx_mlp", "--latency-budget", "20ms", "--max-batch-sizes", "8,32,128", "--queue-delays-us",
              "1000", "--instance-counts", "1,2", *COMMON), ("--max-batch-sizes", "8,32", "--instance-counts", "1")),
    )
}  # fmt: skip


def flags(case: Case, quick: bool) -> list[str]:
    """The case's tune flags; --quick's replace the same flags' values."""
    out = list(case.args)
    q = list(case.quick) if quick else []
    for flag, value in zip(q[::2], q[1::2], strict=True):
        out[out.index(flag) + 1] = value
    return out


def prepare(case: Case, repo: Path) -> None:
    """The case's private copy of its fixtures (stages: precision on stage_infer, the heavy step)."""
    for m in case.models:
        if m == "onnx_mlp":
            sys.path.insert(0, str(ROOT / "tests" / "support"))
            from onnx_model import add_onnx_model

            add_onnx_model(repo, widths=ONNX_WIDTHS)
        else:
            shutil.copytree(ROOT / "fixtures" / "models" / m, repo / m, ignore=shutil.ignore_patterns("__pycache__"))
    if case.name == "stages":
        cfg = repo / "stage_infer" / "config.pbtxt"
        cfg.write_text(cfg.read_text() + 'parameters: { key: "precision" value: { string_value: "fp32" } }\n')


def figure(case: Case, server: Any, start: float, seconds: float, factor: float, requests: int) -> dict:
    """perf_analyzer's figure of the config now loaded, as the case's load measures it (windows of
    `requests` at least)."""
    if case.load == "closed":
        return levels.closed_loop(server, case.target, case.budget_ms, MAX_CONCURRENCY, seconds)
    if case.load == "mix":
        m = levels.mix_measure(server, MIX_WEIGHTS, MIX_BUDGETS_MS, seconds, requests)
        return levels.sustainable_rps(m, start, levels.SHARE_BUDGET, factor)
    if case.load == "stream":
        m = levels.stream_measure(server, case.target, seconds, STREAM_RESPONSES, max(requests, STREAM_WINDOW_REQUESTS))
        return levels.sustainable_rps(m, start, case.budget_ms, factor)
    m = levels.rate_measure(server, case.target, seconds, requests)
    return levels.sustainable_rps(m, start, case.budget_ms, factor)


def run_case(case: Case, args: argparse.Namespace, out: dict[str, Any], save: Any) -> None:
    work = Path(tempfile.mkdtemp(prefix=f"perfkit-predict-cases-{case.name}-"))
    repo = work / "models"
    prepare(case, repo)
    argv = ["tune", "--model-repository", str(repo), "-o", str(work / "tune"), "--trials", str(args.trials),
            "--max-time", f"{args.max_time_s:.0f}s", *flags(case, args.quick)]  # fmt: skip
    out.update(case=case.name, goal=case.goal, load=case.load, argv=argv[5:], load_avg_start=_load())
    print(f"\n[{case.name}] perfkit {' '.join(argv)} (load average {_load()})", flush=True)
    cap = Capture()
    t0 = time.monotonic()
    with cap:
        code = perfkit_main(argv)
    wall = time.monotonic() - t0
    search: dict[str, Any] = {"exit": code, "wall_s": wall, "load_avg": _load()}
    rec_path = work / "tune" / "tune.json"
    rec = TuneRecord.load(rec_path) if rec_path.exists() else None
    if rec is None or cap.runner is None:
        out["searches"] = {"auto": {**search, "refused": f"perfkit tune exited {code} with no record"}}
        save()
        return
    measured = [t for t in rec.trials if "reload_s" in t.metrics and "duplicate_of" not in t.metrics]
    fell_back = bool(getattr(cap.predictor, "fell_back", False))  # a prediction off its tolerance: measured on
    search.update(search=rec.search, why=rec.search_reason, trials=len(measured), fell_back=fell_back)
    best = rec.best()
    if best is not None:  # the claim: the confirmed figure (the search's where no confirmation ran)
        search.update(pick=label(applicable(cap.runner, best.params)), pick_params=best.params,
                      claim_rps=best.claimed_throughput)  # fmt: skip
    out["searches"] = {"auto": search}
    points = grid_points(cap.runner, limit=args.max_grid)
    predicted = {label(p): r for p in points if (r := cap.predicted_for(p)) is not None}
    out.update(predicted=predicted, grid={}, grid_levels={})
    save()
    launched = launch_local(LocalLaunch(repo, models=tuple(dict.fromkeys((case.target, *MIX_WEIGHTS)))
                                        if case.load == "mix" else (case.target,)))  # fmt: skip
    subject = cap.runner.subject
    t0 = time.monotonic()
    with launched as server:
        print(f"[{case.name}] grid: {len(points)} configs by perf_analyzer", flush=True)
        for p in points:
            k = label(p)
            subject.serve(server, subject.candidate(p, is_original=False, number=-1).text)
            print(f"  {k} (predicted {predicted.get(k, 0):.0f}/s)", flush=True)
            if k in out["grid"]:  # the same config under another name (batching off: max_batch_size unused)
                continue
            r = figure(
                case, server, predicted.get(k) or args.start_rps, args.level_s, GRID_FACTOR, args.window_requests
            )
            out["grid"][k], out["grid_levels"][k] = r["rps"], r["levels"]
            save()
        out["grid_wall_s"] = time.monotonic() - t0
        if best is not None:
            print(f"[{case.name}] re-measuring the pick ({search['pick']}, claim {search['claim_rps'] or 0:.0f}/s)")
            subject.serve(server, subject.candidate(best.params, is_original=False, number=-1).text)
            again = figure(case, server, search["claim_rps"] or args.start_rps, args.remeasure_level_s,
                           REMEASURE_FACTOR, args.window_requests)  # fmt: skip
            search.update(remeasured_rps=again["rps"], remeasure_levels=again["levels"])
            claim = search["claim_rps"] or 0.0
            if args.loadgen_s > 0 and claim and case.load == "rate":
                # the second judge on the same config: perf_analyzer holds the claim when its sustainable rate
                # is within the claim's tolerance of it (search_figures' goal); LoadGen runs its Server scenario
                held = again["rps"] >= (1 - CLAIM_TOLERANCE) * claim
                search["judges"] = second_judge(server.endpoints.grpc_url or "", case.target, claim, case.budget_ms,
                                                held, min_duration_s=args.loadgen_s)  # fmt: skip
            elif args.loadgen_s > 0:
                # LoadGen's Server scenario is Poisson arrivals to one model: a closed loop, a mix or a stream's
                # budget is no claim it can judge
                search["judges"] = {"says": f"LoadGen not run: a {case.load} load is not its Server scenario"}
            if search.get("judges"):
                print(f"[{case.name}] {search['judges']['says']}", flush=True)
        subject.restore(server)
    shutil.rmtree(work, ignore_errors=True)
    out["load_avg_end"] = _load()
    save()


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def figures(doc_case: dict[str, Any]) -> dict[str, Any]:
    grid = doc_case.get("grid", {})
    s = doc_case.get("searches", {}).get("auto", {})
    fig = search_figures(s, grid, doc_case.get("goal", "model"))
    fig["predicted"] = s.get("search") == "predict" and not s.get("fell_back")
    fig["errors"] = prediction_errors(doc_case.get("predicted", {}), grid)
    fig["grid_best"] = grid_best(grid)
    return fig


def markdown(cases: list[dict[str, Any]]) -> str:
    rows = ["| case | search (why) | pick | pick / grid best | claim / perf_analyzer | trials | wall, s |"
            " prediction error median, worst (configs) |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for c in cases:
        s, f = c.get("searches", {}).get("auto", {}), figures(c)
        e = f["errors"]
        err = f"{e['median_abs']:.0%}, {e['worst']:+.0%} ({e['n']})" if e["n"] else "–"
        ran = f"{s.get('search', '–')}{', fell back to measuring' if s.get('fell_back') else ''}"
        rows.append(f"| {c['case']} | {ran} ({s.get('why') or s.get('refused', '')}) |"
                    f" {f.get('pick') or '–'} | {_r(f.get('pick_vs_grid_best'))} | {_r(f.get('claim_vs_remeasured'))} |"
                    f" {s.get('trials', '–')} | {s.get('wall_s', 0):.0f} | {err} |")  # fmt: skip
    judged = [(c["case"], c["searches"]["auto"]["judges"]["says"]) for c in cases
              if c.get("searches", {}).get("auto", {}).get("judges")]  # fmt: skip
    if judged:
        rows += ["", *judges_lines(judged)]
    for c in cases:
        loads = f"load average {c.get('load_avg_start')} -> {c.get('load_avg_end')}"
        rows += ["", f"**{c['case']}** ({c.get('load')}; grid {len(c.get('grid', {}))} configs in"
                 f" {c.get('grid_wall_s', 0):.0f} s; {loads})",
                 "", "| config | perf_analyzer | predicted | error |", "|---|---|---|---|"]  # fmt: skip
        for k, got in c.get("grid", {}).items():
            want = c.get("predicted", {}).get(k)
            err = f"{want / got - 1:+.0%}" if want and got else "–"
            rows.append(f"| {k} | {got:.0f} | {want or 0:.0f} | {err} |")
    return "\n".join(rows)


def _r(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    ap.add_argument("--quick", action="store_true", help="smaller spaces (grids) and shorter levels")
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--max-time-s", type=float, default=600.0)
    ap.add_argument("--level-s", type=float, default=3.0, help="seconds of a grid level")
    ap.add_argument("--remeasure-level-s", type=float, default=15.0, help="seconds of a level re-measuring a claim")
    ap.add_argument("--start-rps", type=float, default=50.0, help="a grid config's first rate where none is predicted")
    ap.add_argument("--max-grid", type=int, default=24, help="at most this many grid configs a case")
    ap.add_argument(
        "--loadgen-s",
        type=float,
        default=DEFAULT_MIN_DURATION_S,
        help="seconds of MLPerf LoadGen's Server scenario on each claim (0: not run)",
    )
    ap.add_argument("--suffix", default="", help="appended to the results' file name")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--table", type=Path, help="print the table of a saved JSON and exit")
    add_version_flag(ap)
    args = ap.parse_args()
    args.window_requests = QUICK_WINDOW_REQUESTS if args.quick else WINDOW_REQUESTS
    if args.table:
        print(markdown(json.loads(args.table.read_text())["cases"]))
        return 0
    names = [n.strip() for n in args.cases.split(",") if n.strip()]
    if unknown := [n for n in names if n not in CASES]:
        raise SystemExit(f"--cases: {', '.join(unknown)} unknown; choose from {', '.join(CASES)}")
    if args.quick:
        args.level_s, args.remeasure_level_s = min(args.level_s, 2.0), min(args.remeasure_level_s, 6.0)
        args.trials, args.max_time_s = min(args.trials, 10), min(args.max_time_s, 300.0)
    version = use_version(args.pa_version)
    perf_analyzer()
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H%MZ")
    meta = {"date": stamp, "perf_analyzer": version, "quick": args.quick, "cpus": os.cpu_count(), "argv": sys.argv[1:]}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"predict_quality-{stamp}-cases{'-quick' if args.quick else ''}{args.suffix}"
    cases: list[dict[str, Any]] = []

    def save() -> None:
        path.with_suffix(".json").write_text(json.dumps({**meta, "cases": cases}, indent=1, default=str))
        path.with_suffix(".md").write_text(markdown(cases) + "\n")

    for name in names:
        cases.append({"case": name})
        run_case(CASES[name], args, cases[-1], save)
    print("\n" + markdown(cases))
    ok = all(goals_met(figures(c)) and figures(c)["predicted"] for c in cases)
    print(f"goals {'met' if ok else 'NOT all met'} (predicted, pick >= 0.95x grid best, claim within 10%, wall)")
    return 0 if ok else 2


if __name__ == "__main__":
    sys.exit(main())

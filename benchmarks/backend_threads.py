"""The onnxruntime model's intra-op threads on this machine's cores, measured by perf_analyzer 2.60.0
(the anchor) at each value: which thread count is best, the known answer a tune must find.

The model is `onnx_mlp` (onnxruntime in the python backend) built wide (64 -> 2048 -> 2048 -> 64:
about 4.3 M multiply-adds a row), so that a batch's execution, not the request path, bounds what
one instance completes. Each config has the dynamic batcher on (max_batch_size 32, 500 us queue
delay) and is measured at every intra_op_threads x instance_count of the grid, rounds taking
turns (config A, B, C, ... then again), each a closed-loop perf_analyzer run over gRPC at
--concurrency C with 3 windows. The table gives each config's median throughput and p99, its
ratio to 1 thread on 1 instance, and the machine's load average before and after (a shared machine:
other work's load moves the figures; compare only within one run).

    PYTHONPATH=. .venv/bin/python benchmarks/backend_threads.py --rounds 3
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._anchor import add_version_flag, perf_analyzer, use_version  # noqa: E402
from perfkit.server import LocalLaunch, Server, launch_local  # noqa: E402
from perfkit.server.modelconfig import apply_config, parse_config, render_config  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODEL = "onnx_mlp"
WIDE = (64, 2048, 2048, 64)  # tests/server/tuner/test_tune_threads.py builds the same model


def config_text(base: str, threads: int, instances: int) -> str:
    cfg = parse_config(base)
    cfg.dynamic_batching.max_queue_delay_microseconds = 500
    cfg.instance_group[0].count = instances
    cfg.parameters["intra_op_threads"].string_value = str(threads)
    return render_config(base, cfg)


def pa_concurrency(server: Server, concurrency: int, window_ms: int, work: Path) -> dict[str, float]:
    """One closed-loop perf_analyzer run: (throughput infer/s, p99 ms) from its CSV."""
    binary, env = perf_analyzer()
    out = work / "pa.csv"
    cmd = [str(binary), "-m", MODEL, "-u", str(server.endpoints.grpc_url), "-i", "grpc",
           "--concurrency-range", str(concurrency), "--percentile=99", "--measurement-interval", str(window_ms),
           "-r", "3", "-s", "1000", "-f", str(out)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env}, timeout=120)
    if done.returncode != 0 or not out.exists():
        raise SystemExit(f"perf_analyzer failed ({done.returncode}): {done.stdout[-800:]}{done.stderr[-800:]}")
    with out.open() as f:
        row = next(csv.DictReader(f))
    return {"throughput_rps": float(row["Inferences/Second"]), "p99_ms": float(row["p99 latency"]) / 1e3}


def table(rows: list[dict[str, Any]], grid: list[tuple[int, int]]) -> list[dict[str, Any]]:
    """Median throughput and p99 per config, and its ratio to 1 thread on 1 instance."""
    out = []
    for threads, instances in grid:
        mine = [r for r in rows if (r["threads"], r["instances"]) == (threads, instances)]
        out.append({
            "threads": threads, "instances": instances,
            "throughput_rps": statistics.median(r["throughput_rps"] for r in mine),
            "p99_ms": statistics.median(r["p99_ms"] for r in mine),
            "runs": [round(r["throughput_rps"]) for r in mine],
        })  # fmt: skip
    base = next((o["throughput_rps"] for o in out if (o["threads"], o["instances"]) == (1, 1)), None)
    for o in out:
        o["ratio_to_1x1"] = o["throughput_rps"] / base if base else None
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="1,2", help="intra_op_threads values")
    ap.add_argument("--instances", default="1,2", help="instance counts")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--window-ms", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--tag", default="", help="suffix of the results' file names")
    add_version_flag(ap)
    args = ap.parse_args()
    version = use_version(args.pa_version)
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from onnx_model import add_onnx_model

    grid = [(int(t), int(n)) for n in args.instances.split(",") for t in args.threads.split(",")]
    work = Path(tempfile.mkdtemp(prefix="perfkit-backend-threads-"))
    repo = work / "models"
    path = add_onnx_model(repo, widths=WIDE) / "config.pbtxt"
    base = path.read_text()
    rows: list[dict[str, Any]] = []
    load_before = os.getloadavg()
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, work, True)
        server = stack.enter_context(launch_local(LocalLaunch(repo, models=(MODEL,))))
        for rnd in range(args.rounds):
            for threads, instances in grid:
                apply_config(server, MODEL, path, config_text(base, threads, instances))
                pa_concurrency(server, args.concurrency, 1000, work)  # warm-up after the reload, dropped
                got = pa_concurrency(server, args.concurrency, args.window_ms, work)
                rows.append({"round": rnd, "threads": threads, "instances": instances, **got})
                print(f"round {rnd} threads {threads} x {instances} instance(s): {got['throughput_rps']:7.0f} infer/s,"
                      f" p99 {got['p99_ms']:6.2f} ms", flush=True)  # fmt: skip
    load_after = os.getloadavg()
    summary = table(rows, grid)
    doc = {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H%MZ"),
        "perf_analyzer": version,
        "cpus": len(os.sched_getaffinity(0)),
        "widths": WIDE,
        "concurrency": args.concurrency,
        "window_ms": args.window_ms,
        "load_avg_1m_before_after": [load_before[0], load_after[0]],
        "rows": rows,
        "summary": summary,
    }
    stem = f"backend_threads-{dt.date.today().isoformat()}{args.tag}"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.json").write_text(json.dumps(doc, indent=1))
    lines = [
        f"# {MODEL} {'x'.join(map(str, WIDE))}: intra_op_threads x instances, perf_analyzer {version}",
        "",
        f"`PYTHONPATH=. .venv/bin/python benchmarks/backend_threads.py --rounds {args.rounds}`: {doc['cpus']} CPUs,"
        f" closed loop at concurrency {args.concurrency} over gRPC, 3 windows of {args.window_ms} ms, dynamic"
        f" batching (max_batch_size 32, 500 us), medians of {args.rounds} rounds taking turns. Load average (1 min)"
        f" {load_before[0]:.1f} before, {load_after[0]:.1f} after, on a machine shared with other work.",
        "",
        "| intra_op_threads | instances | threads x instances | throughput (infer/s) | ratio to 1x1 | p99 (ms)"
        " | runs |",
        "|---|---|---|---|---|---|---|",
    ]
    for o in summary:
        lines.append(
            f"| {o['threads']} | {o['instances']} | {o['threads'] * o['instances']} | {o['throughput_rps']:.0f} |"
            f" {o['ratio_to_1x1']:.2f} | {o['p99_ms']:.2f} | {', '.join(map(str, o['runs']))} |"
        )
    (args.out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print(f"saved {args.out / stem}.json and .md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

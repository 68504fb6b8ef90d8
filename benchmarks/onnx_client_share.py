"""What a load generator's own CPU takes from a model that computes on the same cores: perfkit and
perf_analyzer 2.60.0, alternately, at the same Poisson request rates over gRPC, against `onnx_mlp`
(onnxruntime on the CPU; max_batch_size 128, dynamic batching with a 1 ms queue delay, 2
instances), each level 3 windows of 2 s. Per level and tool: the rate completed, the p99 (perfkit:
its worst window's, counted from each request's due time; perf_analyzer: its own p99) and the
client's CPU per request (perfkit: this process's CPU time, every thread; perf_analyzer: its
process's, start and end included, so a little high). perf_analyzer runs with --max-threads 16 (the
grid's, benchmarks/_pa_rate.py PA_THREADS) unless `--pa-threads` names others (each is run).

`--pin` runs the server on CPU 0 and both clients on CPU 1 (neither client then takes the server's
CPU; the server has one core).

    PYTHONPATH=. .venv/bin/python benchmarks/onnx_client_share.py --rates 6000,9000
    PYTHONPATH=. .venv/bin/python benchmarks/onnx_client_share.py --rates 6000,9000 --pin
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import functools
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._anchor import add_version_flag, use_version  # noqa: E402
from benchmarks._pa_rate import PA_THREADS, pa_level  # noqa: E402
from perfkit.measure import profile  # noqa: E402
from perfkit.records import LoadLevel, ProfileSpec  # noqa: E402
from perfkit.server import LocalLaunch, Server, launch_local  # noqa: E402
from perfkit.server.modelconfig import apply_config, parse_config, render_config  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODEL = "onnx_mlp"
WINDOW_MS = 2000
SERVER_CPUS, CLIENT_CPUS = {0}, {1}


def perfkit_level(server: Server, rate: float) -> dict[str, float]:
    spec = ProfileSpec(model=MODEL, levels=(LoadLevel("request_rate", rate, "poisson"),), protocol="grpc",
                       measurement_interval_ms=WINDOW_MS, min_windows=3, max_trials=3, percentile=99,
                       warmup_s=0.5)  # fmt: skip
    cpu0, wall0 = time.process_time(), time.monotonic()
    rec = profile(server, spec)
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    lv = rec.levels[-1]
    p99 = max(w.p99_us for w in lv.windows) / 1e3
    per_request = 1e6 * cpu / max(lv.request_count, 1)
    lateness = lv.send_lateness_p99_us
    return {"completed_rps": lv.completed_rps, "p99_ms": p99, "cpu_us_per_request": per_request,
            "cpu_cores": cpu / wall,
            # the level's p99 over all its windows: from each request's due time (what a budget
            # judges) and from its send (what perf_analyzer reads), and how late the sends were
            "p99_level_ms": lv.latency().p99_us / 1e3, "p99_from_send_ms": lv.service.p99_us / 1e3,
            "send_lateness_p99_ms": (lateness or 0.0) / 1e3}  # fmt: skip


def pa_rate_level(server: Server, rate: float, threads: int) -> dict[str, float]:
    r0, wall0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    tput, p99 = pa_level(server, MODEL, rate, 3 * WINDOW_MS / 1000, threads)
    r1, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic() - wall0
    cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    return {"completed_rps": tput, "p99_ms": p99, "cpu_us_per_request": 1e6 * cpu / max(tput * wall, 1.0),
            "cpu_cores": cpu / wall}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="6000,9000", help="comma-separated request rates (req/s)")
    ap.add_argument("--pa-threads", default=str(PA_THREADS),
                    help="comma-separated perf_analyzer --max-threads values, each run at every rate")  # fmt: skip
    ap.add_argument("--pin", action="store_true", help="the server on CPU 0, both clients on CPU 1")
    ap.add_argument("--max-batch-size", type=int, default=128, help="the config's max_batch_size")
    ap.add_argument("--instances", type=int, default=2, help="the config's instance count")
    ap.add_argument("--repeats", type=int, default=1, help="rounds of every rate and tool, taking turns")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    add_version_flag(ap)
    args = ap.parse_args()
    version = use_version(args.pa_version)
    if args.pin and len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("--pin needs two CPUs")
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from onnx_model import add_onnx_model

    work = Path(tempfile.mkdtemp(prefix="perfkit-onnx-client-share-"))
    repo = work / "models"
    add_onnx_model(repo)
    path = repo / MODEL / "config.pbtxt"
    text = path.read_text()
    cfg = parse_config(text)
    cfg.max_batch_size = args.max_batch_size
    cfg.dynamic_batching.max_queue_delay_microseconds = 1000
    cfg.instance_group[0].count = args.instances
    every = os.sched_getaffinity(0)
    rows: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, work, True)
        if args.pin:  # the server (and its backends' processes) inherit SERVER_CPUS; this thread moves off them
            stack.callback(os.sched_setaffinity, 0, every)
            os.sched_setaffinity(0, SERVER_CPUS)
        server = stack.enter_context(launch_local(LocalLaunch(repo, models=(MODEL,))))
        if args.pin:
            os.sched_setaffinity(0, CLIENT_CPUS)
        apply_config(server, MODEL, path, render_config(text, cfg))
        rates = [float(r) for r in args.rates.split(",")] * args.repeats
        for rate in rates:
            tools = [("perfkit", perfkit_level)] + [
                (f"perf_analyzer {version} x{n}", functools.partial(pa_rate_level, threads=int(n)))
                for n in args.pa_threads.split(",")
            ]
            for tool, level in tools:
                row = {"tool": tool, "rate_rps": rate, **level(server, rate)}
                rows.append(row)
                level_p99 = (
                    f" (level {row['p99_level_ms']:.2f}, from send {row['p99_from_send_ms']:.2f}, sends late"
                    f" {row['send_lateness_p99_ms']:.2f} ms at p99)"
                    if "p99_level_ms" in row
                    else ""
                )
                print(f"{tool:22s} {rate:7.0f}/s: completed {row['completed_rps']:7.0f}/s,"
                      f" p99 {row['p99_ms']:6.2f} ms{level_p99},"
                      f" client CPU {row['cpu_us_per_request']:5.1f} us a request ({row['cpu_cores']:.2f} of a core)",
                      flush=True)  # fmt: skip
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H%MZ")
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {
        "date": stamp,
        "pin": args.pin,
        "max_batch_size": args.max_batch_size,
        "instances": args.instances,
        "perf_analyzer": version,
        "cpus": os.cpu_count(),
        "rows": rows,
    }
    out = args.out / f"onnx_client_share-{stamp}{'-pinned' if args.pin else ''}.json"
    out.write_text(json.dumps(doc, indent=1))
    print(f"saved {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

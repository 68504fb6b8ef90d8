"""Does the batcher simulator's p99 match Triton's at a fixed arrival rate? One config of the
`hungry` fixture at a time (max_batch_size 64, dynamic batching, one instance; with a queue delay
and without), perf_analyzer 2.60.0 at Poisson request rates over gRPC (asynchronous, 3 windows of
at least 100 requests), Triton's statistics read around every level: the execution time per batch
size they show is fitted (perfkit.predict.fit_service) and the simulator run with that fit at the
rates perf_analyzer completed, so the comparison is of the batcher's rules, not of a calibration.

    PYTHONPATH=. .venv/bin/python benchmarks/batcher_fidelity.py            # ~3 min
    PYTHONPATH=. .venv/bin/python benchmarks/batcher_fidelity.py --rates 100,400 --delays-us 4000

Printed and saved (benchmarks/results/batcher_fidelity-<UTC>.json): per config and rate, the
rate asked and completed, the real p99 and mean batch (Triton's executions), the simulated ones.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._anchor import add_version_flag, perf_analyzer, use_version  # noqa: E402
from benchmarks._pa_rate import PA_THREADS, window_ms  # noqa: E402
from perfkit import predict  # noqa: E402
from perfkit.records import CalibrationPoint  # noqa: E402
from perfkit.server import LocalLaunch, launch_local  # noqa: E402
from perfkit.server.base import Server  # noqa: E402
from perfkit.server.modelconfig import apply_config, parse_config, render_config  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODEL = "hungry"
SIM_REQUESTS = 40_000


def _config(original: str, mbs: int, delay_us: int) -> str:
    cfg = parse_config(original)
    cfg.max_batch_size = mbs
    cfg.dynamic_batching.max_queue_delay_microseconds = delay_us
    cfg.instance_group[0].count = 1
    return render_config(original, cfg)


def _executions(stats: dict[str, Any]) -> tuple[int, int]:
    """(executions, inferences) so far."""
    s = stats["model_stats"][0]
    return int(s["execution_count"]), int(s["inference_count"])


def _level(server: Server, rate: float, seconds: float) -> dict[str, Any]:
    binary, env = perf_analyzer()
    window = window_ms(rate, seconds)
    cmd = [str(binary), "-m", MODEL, "-u", str(server.endpoints.grpc_url), "-i", "grpc", "-a", "--request-rate-range",
           f"{rate:.6g}", "--request-distribution", "poisson", "--max-threads", str(PA_THREADS), "--percentile=99",
           "--measurement-interval", str(window), "-r", "3", "-s", "1000"]  # fmt: skip
    before = server.model_stats(MODEL)
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env}, timeout=600)
    after = server.model_stats(MODEL)
    text = out.stdout + out.stderr
    tput, p99 = re.findall(r"Throughput: ([0-9.]+) infer/sec", text), re.findall(r"p99 latency: ([0-9.]+) usec", text)
    (e0, i0), (e1, i1) = _executions(before), _executions(after)
    return {
        "rate_rps": rate,
        "completed_rps": float(tput[-1]) if tput else None,
        "p99_ms": float(p99[-1]) / 1e3 if p99 else None,
        "mean_batch": (i1 - i0) / (e1 - e0) if e1 > e0 else None,
        "points": [(p.batch_size, p.executions, p.service_us) for p in predict.batch_points(before, after, MODEL)],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="100,200,400,600", help="Poisson request rates, req/s")
    ap.add_argument("--delays-us", default="4000,0", help="queue delays to compare, us")
    ap.add_argument("--max-batch-size", type=int, default=64)
    ap.add_argument("--level-s", type=float, default=6.0, help="seconds of each level (3 windows)")
    ap.add_argument("--overhead-us", type=float, default=300.0, help="per-request time outside the instance")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    add_version_flag(ap)
    args = ap.parse_args()
    version = use_version(args.pa_version)
    perf_analyzer()
    rates = [float(r) for r in args.rates.split(",")]
    work = Path(tempfile.mkdtemp(prefix="perfkit-batcher-fidelity-"))
    repo = work / "models"
    shutil.copytree(ROOT / "fixtures" / "models" / MODEL, repo / MODEL, ignore=shutil.ignore_patterns("__pycache__"))
    path = repo / MODEL / "config.pbtxt"
    original = path.read_text()
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H%MZ")
    result: dict[str, Any] = {"date": stamp, "perf_analyzer": version, "load_avg_start": os.getloadavg(), "configs": []}
    with launch_local(LocalLaunch(repo, models=(MODEL,))) as server:
        for delay in (int(d) for d in args.delays_us.split(",")):
            apply_config(server, MODEL, path, _config(original, args.max_batch_size, delay))
            _level(server, rates[0], 2.0)  # warm-up
            levels = [_level(server, r, args.level_s) for r in rates]
            points = predict.merge_points(*[[CalibrationPoint(*p) for p in lv["points"]] for lv in levels])
            fixed, per_item, rms, worst = predict.fit_service(points)
            svc = predict.ServiceModel(fixed, per_item, overhead_us=args.overhead_us)
            cfg = predict.BatcherConfig(args.max_batch_size, True, (), float(delay), 1)
            print(f"max_batch_size {args.max_batch_size}, delay {delay} us: execution {fixed / 1e3:.2f} ms +"
                  f" {per_item / 1e3:.3f} ms an item (fit {rms:.1%} rms, {worst:.1%} worst)", flush=True)  # fmt: skip
            for lv in levels:
                at = lv["completed_rps"] or lv["rate_rps"]
                p = predict.simulate(cfg, svc, predict.Load("poisson", rate_rps=at), requests=SIM_REQUESTS)
                lv.update(sim_p99_ms=p.p99_us / 1e3, sim_mean_batch=p.mean_batch)
                print(f"  {lv['rate_rps']:5.0f}/s asked, {at:6.1f} done: p99 real {lv['p99_ms']} ms, simulated"
                      f" {p.p99_us / 1e3:.1f}; mean batch real {lv['mean_batch']:.1f}, simulated"
                      f" {p.mean_batch:.1f}", flush=True)  # fmt: skip
            result["configs"].append({"max_batch_size": args.max_batch_size, "delay_us": delay, "fit": [fixed, per_item,
                                      rms, worst], "levels": levels})  # fmt: skip
    shutil.rmtree(work, ignore_errors=True)
    result["load_avg_end"] = os.getloadavg()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"batcher_fidelity-{stamp}.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What distributed load costs as work grows: perfkit on Ray, with perf_analyzer as the anchor.

For each worker count (Ray actors spread over a local two-node cluster) and request rate, one
open-loop level against one real Triton; printed per run:
- client CPU per request (all workers' processes, measured by each worker over the level) and
  its ratio to perf_analyzer's at the same rate, measured in the same run (--no-anchor skips it);
- each worker's peak resident memory;
- the coordinator's CPU per worker per window (merging digests, clock sync, bookkeeping);
- what crossed the network per level (pickled digests) against the raw samples' 28 bytes/request;
- the run record's size per level (JSON).
Timing on a shared machine is noisy: compare within one run. Run:
  .venv/bin/python benchmarks/distributed_cost.py            (full: 1-4 workers, 3 rates)
  .venv/bin/python benchmarks/distributed_cost.py --smoke    (seconds: 1-2 workers, one rate)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perfkit.distributed import profile_distributed  # noqa: E402
from perfkit.records import LoadLevel, ProfileSpec, to_dict  # noqa: E402
from perfkit.server import LocalLaunch, launch_local  # noqa: E402
from perfkit.server.local import LocalServer  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RAW_BYTES_PER_REQUEST = 8 * 3 + 4  # due, sent, done (int64) and status (int32)


def anchor_cpu_us_per_request(server: LocalServer, rate: float, seconds: float) -> float | None:
    """perf_analyzer's client CPU per request at this rate (steady state), or None if it cannot run."""
    try:
        from benchmarks.profile_vs_perf_analyzer import run_pa, steady
    except Exception:
        return None
    try:
        proc = run_pa(server, "http", ["--request-rate-range", str(rate)], seconds + 3, windows=1)
        fig = steady(server, "identity", proc, 1.5, seconds)
        proc.kill()
        proc.wait(30)
        return float(fig["cpu_us_per_req"])
    except Exception as err:  # the anchor is optional: say why it is missing
        print(f"  (perf_analyzer anchor unavailable: {err})", flush=True)
        return None


def one_run(server: LocalServer, address: str, workers: int, rate: float, windows: int, window_ms: float) -> dict:
    spec = ProfileSpec(
        model="identity",
        levels=(LoadLevel("request_rate", rate, "constant"),),
        measurement_interval_ms=window_ms,
        max_trials=windows,
        min_windows=windows,
        stability_percentage=100.0,
        warmup_s=0.3,
    )
    cpu0, t0 = time.process_time(), time.monotonic()
    rec = profile_distributed([server], spec, address=address, client_hosts=workers)
    coord_cpu_s, wall_s = time.process_time() - cpu0, time.monotonic() - t0
    lv = rec.levels[0]
    requests = max(lv.request_count, 1)
    digest = sum(w.digest_bytes for w in lv.workers)
    return {
        "workers": workers,
        "rate_rps": rate,
        "requests": lv.request_count,
        "sent_rps": lv.sent_rps,
        "late": lv.late_count,
        "dropped": lv.dropped_count,
        "client_cpu_us_per_req": sum(w.cpu_s for w in lv.workers) / requests * 1e6,
        "worker_peak_rss_mb": max(w.max_rss_bytes for w in lv.workers) / 2**20,
        "coordinator_cpu_ms_per_worker_window": coord_cpu_s / workers / len(lv.windows) * 1e3,
        "digest_kb_per_level": digest / 1024,
        "raw_kb_per_level": lv.request_count * RAW_BYTES_PER_REQUEST / 1024,
        "record_kb_per_level": len(json.dumps(to_dict(lv))) / 1024,
        "clock_uncertainty_us": max(w.clock_uncertainty_ns for w in lv.workers) / 1e3,
        "wall_s": wall_s,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", default="1,2,3,4", help="worker counts (comma-separated)")
    ap.add_argument("--rates", default="200,600,1200", help="request rates per level, req/s")
    ap.add_argument("--windows", type=int, default=5)
    ap.add_argument("--window-ms", type=float, default=1000.0)
    ap.add_argument("--smoke", action="store_true", help="tiny run: 1,2 workers, 200 req/s, 2 short windows")
    ap.add_argument("--no-anchor", action="store_true", help="skip perf_analyzer")
    ap.add_argument("--json", type=Path, help="also write the raw figures here")
    args = ap.parse_args()
    if args.smoke:
        args.workers, args.rates, args.windows, args.window_ms = "1,2", "200", 2, 500.0
    import ray
    from ray.cluster_utils import Cluster

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    small = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024}
    cluster = Cluster(initialize_head=True, head_node_args={**small, "include_dashboard": False})
    repo = Path(tempfile.mkdtemp()) / "models"
    shutil.copytree(ROOT / "fixtures" / "models" / "identity", repo / "identity")
    rows: list[dict[str, Any]] = []
    try:
        cluster.add_node(**small)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        with launch_local(LocalLaunch(repo)) as server:
            print(f"Triton {server.version()}, identity model, 2 Ray nodes on {os.cpu_count()} shared cores")
            anchors = {}
            for rate in [float(r) for r in args.rates.split(",")]:
                anchors[rate] = None if args.no_anchor else anchor_cpu_us_per_request(server, rate, 3.0)
                for workers in [int(w) for w in args.workers.split(",")]:
                    row = one_run(server, cluster.address, workers, rate, args.windows, args.window_ms)
                    row["pa_cpu_us_per_req"] = anchors[rate]
                    rows.append(row)
                    ratio = (
                        f" ({row['client_cpu_us_per_req'] / anchors[rate]:.2f}x perf_analyzer's {anchors[rate]:.0f})"
                        if anchors[rate]
                        else ""
                    )
                    print(
                        f"  {workers} worker(s) @ {rate:.0f}/s: {row['requests']} requests,"
                        f" sent {row['sent_rps']:.1f}/s, late {row['late']}, dropped {row['dropped']};"
                        f" client CPU {row['client_cpu_us_per_req']:.0f} us/request{ratio};"
                        f" worker RSS {row['worker_peak_rss_mb']:.0f} MB;"
                        f" coordinator {row['coordinator_cpu_ms_per_worker_window']:.1f} ms CPU/worker/window;"
                        f" digests {row['digest_kb_per_level']:.1f} KB vs raw {row['raw_kb_per_level']:.1f} KB;"
                        f" record {row['record_kb_per_level']:.1f} KB/level;"
                        f" clock ± {row['clock_uncertainty_us']:.0f} us",
                        flush=True,
                    )
    finally:
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(repo.parent, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

"""What --metrics-port costs the measurement: alternating profiles with and without the exporter.

One bundled Triton serves the `identity` fixture (sub-ms: the client's own cost shows most); each
round runs `perfkit profile -u` twice, once plain and once with --metrics-port, in alternating
order, and a scraper fetches /metrics every second while the exporter is up (as Prometheus would).
Printed per arm: throughput at each level (median over rounds) and the client process's CPU
time per request (from the child's rusage, its start-up included). Compare only within one run.

  .venv/bin/python benchmarks/live_metrics_cost.py --rounds 4      # ~2 min
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import urllib.request
from pathlib import Path

from perfkit.server import LocalLaunch, launch_local
from perfkit.server._ports import free_ports

ROOT = Path(__file__).resolve().parent.parent


def _scrape(port: int, stop: threading.Event) -> None:
    while not stop.wait(1.0):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read()
        except OSError:
            pass


def _run(url: str, out: Path, concurrency: str, interval_ms: int, metrics: bool) -> tuple[dict[str, float], float]:
    cmd = [sys.executable, "-m", "perfkit", "profile", "-m", "identity", "-u", url, "--concurrency-range", concurrency,
           "--measurement-interval", str(interval_ms), "-o", str(out)]  # fmt: skip
    stop = threading.Event()
    if metrics:
        port = free_ports(1)[0]
        cmd += ["--metrics-port", str(port)]
        threading.Thread(target=_scrape, args=(port, stop), daemon=True).start()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    stop.set()
    if status != 0:
        raise SystemExit(f"profile failed ({status}): {' '.join(cmd)}")
    data = json.loads(out.read_text())
    tput = {lv["load"]["value"]: lv["throughput_infer_per_s"] for lv in data["levels"]}
    requests = sum(lv["request_count"] for lv in data["levels"])
    return tput, (usage.ru_utime + usage.ru_stime) / max(1, requests) * 1e6  # us per request, start-up included


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--concurrency", default="1:4:3")
    ap.add_argument("--interval-ms", type=int, default=1000)
    args = ap.parse_args()
    results: dict[bool, list[tuple[dict[str, float], float]]] = {False: [], True: []}
    with (
        tempfile.TemporaryDirectory() as tmp,
        launch_local(LocalLaunch(ROOT / "fixtures" / "models", models=("identity",))) as server,
    ):
        for r in range(args.rounds):
            for metrics in (r % 2 == 0, r % 2 != 0):  # alternate which arm goes first
                results[metrics].append(
                    _run(server.endpoints.http_url, Path(tmp) / "run.json", args.concurrency, args.interval_ms, metrics)
                )
    print(f"{'arm':<22}{'level':>8}{'infer/s (median)':>20}{'client CPU us/request':>26}")
    for metrics, runs in results.items():
        arm = "--metrics-port" if metrics else "plain"
        cpu = statistics.median(c for _, c in runs)
        for level in runs[0][0]:
            tput = statistics.median(t[level] for t, _ in runs)
            print(f"{arm:<22}{level:>8g}{tput:>20,.0f}{cpu:>26.1f}")
    for level in results[False][0][0]:
        plain = statistics.median(t[level] for t, _ in results[False])
        live = statistics.median(t[level] for t, _ in results[True])
        print(f"concurrency {level:g}: with/without = {live / plain:.3f}")
    cpu_live = statistics.median(c for _, c in results[True])
    cpu_plain = statistics.median(c for _, c in results[False])
    print(f"client CPU with/without = {cpu_live / cpu_plain:.3f}")


if __name__ == "__main__":
    main()

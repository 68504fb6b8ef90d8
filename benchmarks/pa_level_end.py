"""Why some perf_analyzer runs "do not finish a level": how each run ends, how long it takes, and how many
sockets the client holds, for perf_analyzer 2.60.0 and 2.41.0 over HTTP and gRPC.

Two cases, each run under a wall-clock limit on one server:
- closed loop, the 16-float identity model, `--concurrency-range C -p 3000` (C = 1, 4): perf_analyzer ends
  a level after at most --max-trials (10) windows of 1.2 x -p each (src/inference_profiler.cc: Measure sleeps
  measurement_window * 1.2; ProfileHelper loops while completed_trials < max_trials), stable when the last 3
  windows' throughput and latency each lie within -s (10%) of each other, else exit 2 "Failed to obtain
  stable measurement". The run's windows and their spread are printed.
- open loop above what the server answers: `--request-rate-range R -a -p 1000` over HTTP and gRPC. The
  async HTTP client gives every outstanding request its own TCP connection (HTTP/1.1, one curl easy handle
  per request); a level ends only when every outstanding request is answered (LoadWorker::WaitForOngoingRequests,
  no timeout). The client's socket count is sampled from /proc/PID/fd.

    .venv/bin/python benchmarks/pa_level_end.py [--limit-s 120] [--rate 3000] [--pa-versions 2.60,2.41]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._anchor import anchor_version, perf_analyzer  # noqa: E402
from perfkit.server import LocalLaunch, launch_local  # noqa: E402
from perfkit.server.local import LocalServer  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def sockets(pid: int) -> int:
    """Open sockets of a process (its /proc/PID/fd links to socket:[...])."""
    n = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            n += os.readlink(fd).startswith("socket:")
        except OSError:
            pass
    return n


def run(server: LocalServer, version: str, protocol: str, load: list[str], limit_s: float) -> dict:
    """One perf_analyzer run: how it ended, its wall time, its windows, the most sockets it held."""
    binary, env = perf_analyzer(version)
    url = server.endpoints.http_url if protocol == "http" else str(server.endpoints.grpc_url)
    cmd = [str(binary), "-m", "identity", "-u", url, "-i", protocol, *load, "-v"]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, **env})
    lines: list[str] = []

    def pump() -> None:
        for line in proc.stdout or []:  # line by line: the summary's time is read while the run goes on
            lines.append(line)

    reader = threading.Thread(target=pump)
    reader.start()
    peak, summary_s = 0, None
    while proc.poll() is None and time.monotonic() - t0 < limit_s:
        try:
            peak = max(peak, sockets(proc.pid))
        except OSError:
            break
        if summary_s is None and any("Inferences/Second vs." in ln for ln in lines):
            summary_s = time.monotonic() - t0
        time.sleep(0.5)
    ended = "exit" if proc.poll() is not None else "still running"
    if ended != "exit":
        proc.kill()
    proc.wait()
    reader.join(5)
    text = "".join(lines)
    tput = [float(x) for x in re.findall(r"throughput: ([0-9.]+) infer/sec\.", text)]
    return {"rc": proc.returncode if ended == "exit" else None, "wall_s": time.monotonic() - t0, "ended": ended,
            "unstable": "Failed to obtain stable" in text, "windows": len(tput), "peak_sockets": peak,
            "summary_s": summary_s,
            "window_cv": statistics.stdev(tput) / statistics.mean(tput) if len(tput) > 1 else None}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit-s", type=float, default=120.0, help="wall-clock limit per run (as `timeout 120`)")
    ap.add_argument("--rate", type=int, default=3000, help="open-loop rate, above what the server answers")
    ap.add_argument("--pa-versions", default="2.60,2.41")
    ap.add_argument("--cases", default="closed,open")
    args = ap.parse_args()
    versions = [anchor_version(v) for v in args.pa_versions.split(",")]
    repo = Path(tempfile.mkdtemp()) / "models"
    shutil.copytree(ROOT / "fixtures" / "models" / "identity", repo / "identity")
    plan = []
    if "closed" in args.cases:
        plan += [(v, p, ["--concurrency-range", c, "-p", "3000"]) for c in ("1", "4") for p in ("http", "grpc")
                 for v in versions]  # fmt: skip
    if "open" in args.cases:
        rate = ["--request-rate-range", str(args.rate), "-a", "-p", "1000", "-s", "100"]
        plan += [(v, p, rate) for p in ("http", "grpc") for v in versions]
    with launch_local(LocalLaunch(repo)) as server:
        print(f"Triton {server.version()}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        for v, p, load in plan:
            r = run(server, v, p, load, args.limit_s)
            cv = f"{r['window_cv'] * 100:.0f}%" if r["window_cv"] is not None else "-"
            summary = f"{r['summary_s']:.0f} s" if r["summary_s"] is not None else "-"
            print(f"  perf_analyzer {v} {p:4} {' '.join(load):42}: {r['ended']:13} rc={r['rc']} after "
                  f"{r['wall_s']:5.1f} s (summary printed at {summary}), {r['windows']} windows "
                  f"{'unstable' if r['unstable'] else 'stable'}, window throughput CV {cv}, up to "
                  f"{r['peak_sockets']} sockets; load average {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()

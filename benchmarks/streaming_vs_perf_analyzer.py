"""perfkit vs the real perf_analyzer --streaming, alternately, on one server and the streamer fixture.

The streamer fixture's truth: first token after first_token_ms, then one token per
token_ms + token_ms_per_stream x (streams in flight - 1). Both tools run closed loop at
each concurrency over gRPC streaming; perfkit's TTFT/ITL come from its run record,
perf_analyzer's from its --profile-export-file (every request's send and response
timestamps, the data genai-perf computes its LLM metrics from), both as p50 over the
same kind of samples (TTFT per request, ITL per response gap). Client CPU per response
is /proc/<pid>/stat of each tool's process over a steady interval, divided by the
responses the server sent in it (requests from the server's statistics x tokens per
request); beside it the same from the threads' /proc/<pid>/task/*/schedstat (nanoseconds,
where /proc/<pid>/stat counts 10 ms ticks: a few ticks a second at these rates). Prints
figures and ratios perfkit / perf_analyzer.

Run: .venv/bin/python benchmarks/streaming_vs_perf_analyzer.py [--rounds 3] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._anchor import add_version_flag, perf_analyzer, use_version  # noqa: E402
from perfkit.records import RunRecord  # noqa: E402
from perfkit.server import LocalLaunch, launch_local  # noqa: E402
from perfkit.server.local import LocalServer  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TICK = os.sysconf("SC_CLK_TCK")
MODEL = "streamer"
FIRST_TOKEN_MS, TOKEN_MS, PER_STREAM_MS = 20.0, 5.0, 1.0  # fixtures/models/streamer/config.pbtxt


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def thread_cpu_ns(pid: int) -> dict[str, int]:
    """Each live thread's CPU time (ns) from /proc/<pid>/task/*/schedstat: nanosecond resolution,
    where /proc/<pid>/stat counts 10 ms ticks (a few ticks per second at these rates)."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out[task.name] = int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):  # the thread ended meanwhile
            pass
    return out


def requests_done(server: LocalServer) -> int:
    stats = server.model_stats(MODEL)["model_stats"][0]["inference_stats"]
    return int(stats["success"]["count"])


def steady_cpu(
    server: LocalServer, proc: subprocess.Popen[str], warm_s: float, span_s: float, tokens: int
) -> tuple[float, float]:
    """Client CPU (us) per response over [warm, warm + span] of a running tool: from the process's
    ticks, and from its threads' schedstat (threads that end within the span are not counted)."""
    time.sleep(warm_s)
    n0, c0, t0 = requests_done(server), cpu_s(proc.pid), thread_cpu_ns(proc.pid)
    time.sleep(span_s)
    n1, c1, t1 = requests_done(server), cpu_s(proc.pid), thread_cpu_ns(proc.pid)
    responses = max((n1 - n0) * tokens, 1)
    threads_ns = sum(ns - t0.get(tid, 0) for tid, ns in t1.items())
    return (c1 - c0) / responses * 1e6, threads_ns / responses / 1e3


def run_perfkit(server: LocalServer, data: Path, c: int, seconds: int) -> tuple[subprocess.Popen[str], Path]:
    out = Path(tempfile.mkdtemp()) / "run.json"
    cmd = [sys.executable, "-m", "perfkit", "profile", "-m", MODEL, "-u", str(server.endpoints.grpc_url),
           "--admin-url", server.endpoints.http_url, "-i", "grpc", "--streaming", "--input-data", str(data),
           "--concurrency-range", str(c), "-p", "1000", "-r", str(seconds), "--min-windows", str(seconds),
           "-o", str(out)]  # fmt: skip
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), out


def run_pa(server: LocalServer, data: Path, c: int, seconds: int) -> tuple[subprocess.Popen[str], Path]:
    binary, env = perf_analyzer()
    export = Path(tempfile.mkdtemp()) / "pa.json"
    cmd = [str(binary), "-m", MODEL, "-u", str(server.endpoints.grpc_url), "-i", "grpc", "--streaming",
           "--input-data", str(data), "--concurrency-range", str(c), "--measurement-interval", str(seconds * 1000 // 3),
           "-r", "3", "-s", "100", "--profile-export-file", str(export)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, **env})
    return proc, export


def pa_figures(export: Path, tokens: int) -> dict[str, float]:
    """TTFT and ITL p50 (ms) from perf_analyzer's profile export (ns timestamps per request).

    perf_analyzer 2.41's export has no response outputs: the empty final response it asks
    for is the last timestamp of a request with tokens + 1 of them, and is dropped.
    """
    doc = json.loads(export.read_text())
    ttft, itl = [], []
    for exp in doc["experiments"]:
        for req in exp["requests"]:
            times = list(req.get("response_timestamps", []))[:tokens]
            if not times:
                continue
            ttft.append(times[0] - req["timestamp"])
            itl.extend(np.diff(times).tolist())
    return {"ttft_p50_ms": float(np.percentile(ttft, 50)) / 1e6, "itl_p50_ms": float(np.percentile(itl, 50)) / 1e6}


def perfkit_figures(path: Path) -> dict[str, float]:
    lv = RunRecord.load(path).levels[0]
    assert lv.streaming is not None
    return {"ttft_p50_ms": lv.streaming.ttft.p50_us / 1e3, "itl_p50_ms": lv.streaming.itl.p50_us / 1e3}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--concurrency", default="1,4")
    ap.add_argument("--seconds", type=int, default=8, help="measurement per run")
    ap.add_argument("--smoke", action="store_true", help="one short round at concurrency 1")
    add_version_flag(ap)
    args = ap.parse_args()
    pa_version = use_version(args.pa_version)
    if args.smoke:
        args.rounds, args.concurrency, args.seconds = 1, "1", 4
    levels = [int(c) for c in args.concurrency.split(",")]
    tmp = Path(tempfile.mkdtemp())
    repo = tmp / "models"
    import shutil

    shutil.copytree(ROOT / "fixtures" / "models" / MODEL, repo / MODEL)
    data = tmp / "data.json"
    data.write_text(json.dumps({"data": [{"text_input": ["hello"], "max_tokens": [args.tokens], "stream": [True]}]}))
    rows = []
    with launch_local(LocalLaunch(repo, env={"OPENBLAS_NUM_THREADS": "1"})) as server:
        print(f"Triton {server.version()}, perf_analyzer {pa_version} (the anchor)", flush=True)
        for c in levels:
            for r in range(args.rounds):
                for tool in ("perfkit", "perf_analyzer") if r % 2 == 0 else ("perf_analyzer", "perfkit"):
                    runner = run_perfkit if tool == "perfkit" else run_pa
                    proc, out = runner(server, data, c, args.seconds)
                    cpu, cpu_ns = steady_cpu(server, proc, 2.0, max(1.0, args.seconds - 2.0), args.tokens)
                    stdout, _ = proc.communicate(timeout=120)
                    if proc.returncode != 0:
                        raise SystemExit(f"{tool} failed ({proc.returncode}):\n{stdout[-3000:]}")
                    figs = perfkit_figures(out) if tool == "perfkit" else pa_figures(out, args.tokens)
                    rows.append({"tool": tool, "c": c, "round": r, "cpu_us_per_response": cpu,
                                 "cpu_ns_us_per_response": cpu_ns, **figs})  # fmt: skip
                    print(f"  {tool:13} c{c} round {r}: TTFT p50 {figs['ttft_p50_ms']:.2f} ms, ITL p50 "
                          f"{figs['itl_p50_ms']:.2f} ms, {cpu:.1f} us CPU/response "
                          f"({cpu_ns:.1f} by schedstat)", flush=True)  # fmt: skip
    print("\nmedians over rounds; fixture truth excludes the server's own overhead:")
    for c in levels:
        med = {
            tool: {k: statistics.median(r[k] for r in rows if r["tool"] == tool and r["c"] == c)
                   for k in ("ttft_p50_ms", "itl_p50_ms", "cpu_us_per_response", "cpu_ns_us_per_response")}
            for tool in ("perfkit", "perf_analyzer")
        }  # fmt: skip
        pk, pa = med["perfkit"], med["perf_analyzer"]
        truth_itl = TOKEN_MS + PER_STREAM_MS * (c - 1)
        print(f"  c{c}: fixture TTFT {FIRST_TOKEN_MS:.1f} ms, ITL {truth_itl:.1f} ms | "
              f"perfkit TTFT {pk['ttft_p50_ms']:.2f}, ITL {pk['itl_p50_ms']:.2f}, "
              f"CPU {pk['cpu_us_per_response']:.1f} us | "
              f"perf_analyzer TTFT {pa['ttft_p50_ms']:.2f}, ITL {pa['itl_p50_ms']:.2f}, "
              f"CPU {pa['cpu_us_per_response']:.1f} us")  # fmt: skip
        print(f"       ratios perfkit/perf_analyzer: TTFT {pk['ttft_p50_ms'] / pa['ttft_p50_ms']:.3f}, "
              f"ITL {pk['itl_p50_ms'] / pa['itl_p50_ms']:.3f}, "
              f"CPU/response {pk['cpu_us_per_response'] / max(pa['cpu_us_per_response'], 1e-9):.2f} "
              f"(schedstat: {pk['cpu_ns_us_per_response']:.1f} / {pa['cpu_ns_us_per_response']:.1f} us, "
              f"{pk['cpu_ns_us_per_response'] / max(pa['cpu_ns_us_per_response'], 1e-9):.2f})")  # fmt: skip


if __name__ == "__main__":
    main()

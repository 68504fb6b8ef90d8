"""perfkit vs the real perf_analyzer, alternately, on one server and model, in one run.

Every figure is measured the same way for both tools, from the outside: the request
count comes from the server's own statistics over a steady-state interval, and the
client CPU from /proc/<pid>/stat of the tool's process over that same interval.
Prints ratios perfkit / perf_analyzer. Run: .venv/bin/python benchmarks/profile_vs_perf_analyzer.py
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._anchor import add_version_flag, perf_analyzer, use_version  # noqa: E402
from perfkit.recorder import mean_ci_rel  # noqa: E402
from perfkit.records import RunRecord  # noqa: E402
from perfkit.server import LocalLaunch, launch_local  # noqa: E402
from perfkit.server.local import LocalServer  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime, all threads


def group_cpu_s(pgid: int) -> float:
    """CPU seconds of every live process in process group pgid (the server and its model processes)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[2]) == pgid:
            total += (int(fields[11]) + int(fields[12])) / TICK
    return total


def successes(server: LocalServer, model: str) -> int:
    return _server_state(server, model)[0]


def _server_state(server: LocalServer, model: str) -> tuple[int, int]:
    """(successful requests, ns the model's instances spent computing them) from the server's statistics."""
    stats = server.model_stats(model)["model_stats"][0]["inference_stats"]
    busy = sum(int(stats[k]["ns"]) for k in ("compute_input", "compute_infer", "compute_output"))
    return int(stats["success"]["count"]), busy


def steady(server: LocalServer, model: str, proc: subprocess.Popen[str], warm_s: float, span_s: float) -> dict:
    """Throughput, client CPU/request, the server's CPU/request (tritonserver and its model
    processes: its process group) and how busy the model's instances were (compute time per
    second: 1.0 is one instance computing all the time) over [warm, warm+span] of a running tool."""
    time.sleep(warm_s)
    (n0, b0), c0, s0, t0 = _server_state(server, model), cpu_s(proc.pid), group_cpu_s(server.pid), time.monotonic()
    time.sleep(span_s)
    (n1, b1), c1, s1, t1 = _server_state(server, model), cpu_s(proc.pid), group_cpu_s(server.pid), time.monotonic()
    n = n1 - n0
    return {"rps": n / (t1 - t0), "cpu_us_per_req": (c1 - c0) / max(n, 1) * 1e6,
            "server_cpu_us_per_req": (s1 - s0) / max(n, 1) * 1e6,
            "instance_busy": (b1 - b0) / 1e9 / (t1 - t0)}  # fmt: skip


def run_perfkit(
    server: LocalServer,
    protocol: str,
    level: list[str],
    seconds: float,
    model: str = "identity",
    extra: tuple[str, ...] = (),
) -> subprocess.Popen:
    out = Path(tempfile.mkdtemp()) / "run.json"
    windows = str(int(seconds))
    cmd = [sys.executable, "-m", "perfkit", "profile", "-m", model, "-u", url_for(server, protocol),
           "--admin-url", server.endpoints.http_url, "-i", protocol, *level, *extra,
           "-p", "1000", "-r", windows, "--min-windows", windows, "-o", str(out)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.record_path = out  # type: ignore[attr-defined]  # the run's record path rides on its Popen object
    return proc


def run_pa(
    server: LocalServer,
    protocol: str,
    level: list[str],
    seconds: float,
    windows: int = 1,
    model: str = "identity",
    extra: tuple[str, ...] = (),
) -> subprocess.Popen:
    """perf_analyzer at one level; `windows` x (seconds / windows) windows, stability check off (-s 100)."""
    binary, env = perf_analyzer()
    window_ms = str(int(seconds * 1000 / windows))
    cmd = [str(binary), "-m", model, "-u", url_for(server, protocol), "-i", protocol, *level, *extra,
           "--measurement-interval", window_ms, "-r", str(windows), "-s", "100"]  # fmt: skip
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, **env})


def url_for(server: LocalServer, protocol: str) -> str:
    return server.endpoints.http_url if protocol == "http" else str(server.endpoints.grpc_url)


def closed_loop(server: LocalServer, rounds: int) -> list[dict]:
    rows = []
    for protocol in ("http", "grpc"):
        for c in (1, 4):
            for r in range(rounds):
                for tool in ("perfkit", "perf_analyzer") if r % 2 == 0 else ("perf_analyzer", "perfkit"):
                    runner = run_perfkit if tool == "perfkit" else run_pa
                    proc = runner(server, protocol, ["--concurrency-range", str(c)], 8)
                    fig = steady(server, "identity", proc, 2.5, 4.0)
                    proc.wait(60)
                    rows.append({"tool": tool, "protocol": protocol, "concurrency": c, "round": r, **fig})
                    print(f"  {tool:13} {protocol} c{c} round {r}: {fig['rps']:8.0f} infer/s, "
                          f"{fig['cpu_us_per_req']:6.1f} us CPU/request, server "
                          f"{fig['server_cpu_us_per_req']:6.1f} us/request", flush=True)  # fmt: skip
    return rows


# Image-sized requests: FP32 [3,224,224] = 602,112 bytes per request (the "image" fixture).
LARGE_CASES = (("http", "http", ()), ("grpc", "grpc", ()), ("shm", "http", ("--shared-memory", "system")))


def large_tensors(server: LocalServer, rounds: int, seconds: float = 8.0, cases: str = "") -> list[dict]:
    """Closed loop c1/c4 on the image model: HTTP, gRPC, system shared memory; both tools alternately."""
    rows = []
    chosen = [c for c in LARGE_CASES if not cases or c[0] in cases.split(",")]
    warm_s, span_s = seconds * 0.3, seconds * 0.5
    for case, protocol, extra in chosen:
        for c in (1, 4):
            for r in range(rounds):
                for tool in ("perfkit", "perf_analyzer") if r % 2 == 0 else ("perf_analyzer", "perfkit"):
                    level = ["--concurrency-range", str(c)]
                    if tool == "perfkit":
                        proc = run_perfkit(server, protocol, level, seconds, model="image", extra=extra)
                    else:
                        proc = run_pa(server, protocol, level, seconds, model="image", extra=extra)
                    fig = steady(server, "image", proc, warm_s, span_s)
                    proc.wait(120)
                    rows.append({"tool": tool, "case": case, "concurrency": c, "round": r, **fig})
                    print(f"  {tool:13} {case:4} c{c} round {r}: {fig['rps']:8.0f} infer/s, "
                          f"{fig['cpu_us_per_req']:7.1f} us CPU/request", flush=True)  # fmt: skip
    print("\nlarge tensors, ratios perfkit / perf_analyzer (median over rounds; goals: throughput >= 1.1")
    print("at c4, client CPU per request <= 0.33):")
    for case, _, _ in chosen:
        for c in (1, 4):
            pick = [r for r in rows if r["case"] == case and r["concurrency"] == c]
            fig = {t: [r for r in pick if r["tool"] == t] for t in ("perfkit", "perf_analyzer")}
            pk, pa = (statistics.median(r["rps"] for r in fig[t]) for t in fig)
            pk_cpu, pa_cpu = (statistics.median(r["cpu_us_per_req"] for r in fig[t]) for t in fig)
            ratio, cpu_ratio = pk / max(pa, 1e-9), pk_cpu / max(pa_cpu, 1e-9)
            met = ("met" if ratio >= 1.1 else "NOT met") if c == 4 else "-"
            print(f"  {case:4} c{c}: throughput {pk:7.0f} vs {pa:7.0f} = {ratio:.2f} (goal {met}); "
                  f"client CPU/request {pk_cpu:6.1f} vs {pa_cpu:6.1f} us = {cpu_ratio:.2f} "
                  f"(goal {'met' if cpu_ratio <= 1 / 3 else 'NOT met'})")  # fmt: skip
    return rows


def open_loop(server: LocalServer, capacity_rps: float) -> list[dict]:
    rows = []
    for frac in (0.3, 0.45, 0.6):
        rate = round(capacity_rps * frac, -1)
        proc = run_perfkit(server, "http", ["--request-rate-range", str(rate)], 6)
        proc.wait(180)
        lv = RunRecord.load(proc.record_path).levels[0]  # type: ignore[attr-defined]  # the run's record path rides on its Popen object
        pa = run_pa(server, "http", ["--request-rate-range", str(rate)], 6, windows=3)
        pa_out, _ = pa.communicate(timeout=180)
        pa_tput = _pa_float(pa_out, r"Throughput: ([0-9.]+) infer/sec")
        pa_send = _pa_send_rps(pa_out)
        rows.append({"rate": rate, "perfkit_sent_rps": lv.sent_rps, "perfkit_done_rps": lv.completed_rps,
                     "perfkit_lateness_p99_us": lv.send_lateness_p99_us, "perfkit_late": lv.late_count,
                     "perfkit_dropped": lv.dropped_count, "pa_send_rps": pa_send, "pa_throughput": pa_tput,
                     "pa_delayed_warning": "delayed" in pa_out.lower()})  # fmt: skip
        print(f"  rate {rate:.0f}/s: perfkit sent {lv.sent_rps:.1f}/s ({(lv.sent_rps / rate - 1) * 100:+.2f}%), "
              f"done {lv.completed_rps:.1f}/s, send lateness p99 {(lv.send_lateness_p99_us or 0):.0f} us, "
              f"late {lv.late_count}; perf_analyzer {'on schedule' if pa_send is None else f'sent {pa_send}/s'}, "
              f"throughput {pa_tput}/s", flush=True)  # fmt: skip
    return rows


def _perfkit_holds(server: LocalServer, rate: float, seconds: float, workers: int) -> tuple[bool, str]:
    """One perfkit process (or `workers`) at `rate` for `seconds`: held when every due request was
    sent (none dropped), the p99 send lateness is at most 1 ms, and the server kept up."""
    proc = run_perfkit(server, "http", ["--request-rate-range", f"{rate:g}"], seconds,
                       extra=("--workers", str(workers)))  # fmt: skip
    proc.wait(180)
    lv = RunRecord.load(proc.record_path).levels[0]  # type: ignore[attr-defined]  # the run's record path rides on its Popen object
    lateness_ok = lv.send_lateness_p99_us is not None and lv.send_lateness_p99_us <= 1000
    held = lv.dropped_count == 0 and lateness_ok and lv.completed_rps >= 0.98 * rate
    return held, (f"sent {lv.sent_rps:.0f}/s, done {lv.completed_rps:.0f}/s, late {lv.late_count}, "
                  f"dropped {lv.dropped_count}, lateness p99 {(lv.send_lateness_p99_us or 0):.0f} us")  # fmt: skip


def _pa_send_rps(out: str) -> float | None:
    """perf_analyzer's send rate: it prints one ("Avg send request rate", with a "delayed" warning)
    only when more than 1% of its sends were late (DELAY_PCT_THRESHOLD, src/inference_profiler.cc);
    None when it printed neither, i.e. it kept its schedule."""
    return _pa_float(out, r"Avg send request rate: ([0-9.]+)")


def _pa_holds(server: LocalServer, rate: float, seconds: float) -> tuple[bool, str]:
    """perf_analyzer at `rate`: held when it printed no "delayed" warning (at most 1% of its sends
    late; it reports no lateness figure) and its throughput kept up."""
    # 2 s windows, up to 8: it stops at its 3 stable ones (fewer, shorter windows often never settle)
    pa = run_pa(server, "http", ["--request-rate-range", f"{rate:g}"], 16.0, windows=8)
    out, _ = pa.communicate(timeout=180)
    send = _pa_send_rps(out)
    tput = _pa_float(out, r"Throughput: ([0-9.]+) infer/sec") or 0.0
    held = send is None and tput >= 0.98 * rate and "delayed" not in out.lower()
    if not tput:
        print("    perf_analyzer said:", out.strip().splitlines()[-3:])
    warning = next((line.strip() for line in out.splitlines() if "delayed" in line.lower()), "")
    sent = "on schedule" if send is None else f"sent {send:.0f}/s"
    return held, f"{sent}, throughput {tput:.0f}/s{'; ' + warning if warning else ''}"


def client_capacity(server: LocalServer, seconds: float, workers: int) -> list[dict]:
    """The highest open-loop rate each tool holds against the identity model (the goal's "schedule
    held": nothing dropped, p99 send lateness <= 1 ms; perf_analyzer: its send rate on target and
    no "delayed" warning, as it reports no lateness of its own): a ladder of x1.4
    steps from 500/s until a rate fails, then three bisections between the last held and the first
    failed rate. The server's own ceiling caps both: a tool below it is the bottleneck."""
    tools: list[tuple[str, Any]] = [
        ("perfkit", functools.partial(_perfkit_holds, workers=1)),
        ("perf_analyzer", _pa_holds),
    ]
    if workers > 1:
        tools.insert(1, (f"perfkit --workers {workers}", functools.partial(_perfkit_holds, workers=workers)))
    rows = []
    for name, probe in tools:
        held_rate, failed_rate, rate = 0.0, 0.0, 500.0
        while failed_rate == 0.0 and rate < 100_000:
            ok, what = probe(server, rate, seconds)
            print(f"  {name:20} {rate:8.0f}/s: {'held' if ok else 'NOT held'} ({what})", flush=True)
            held_rate, failed_rate = (rate, 0.0) if ok else (held_rate, rate)
            rate *= 1.4
        for _ in range(3):
            rate = round((held_rate + failed_rate) / 2, -1)
            ok, what = probe(server, rate, seconds)
            print(f"  {name:20} {rate:8.0f}/s: {'held' if ok else 'NOT held'} ({what})", flush=True)
            held_rate, failed_rate = (rate, failed_rate) if ok else (held_rate, rate)
        rows.append({"tool": name, "held_rps": held_rate, "failed_rps": failed_rate})
    print("\nhighest open-loop rate held (nothing dropped, send lateness p99 <= 1 ms, server kept up):")
    for row in rows:
        print(f"  {row['tool']:20} {row['held_rps']:8.0f}/s (failed at {row['failed_rps']:.0f}/s)")
    pa_held = next(r["held_rps"] for r in rows if r["tool"] == "perf_analyzer")
    pk_held = rows[0]["held_rps"]
    print(f"  goal (perfkit holds the highest rate perf_analyzer holds): {'met' if pk_held >= pa_held else 'NOT met'}")
    return rows


def _pa_float(text: str, pattern: str) -> float | None:
    m = re.findall(pattern, text)
    return float(m[-1]) if m else None


def _perfkit_default(
    server: LocalServer, model: str, c: int, stability: float | None = None
) -> tuple[float, float, bool, float | None]:
    out = Path(tempfile.mkdtemp()) / "run.json"
    extra = [] if stability is None else ["-s", f"{stability:g}"]
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "perfkit", "profile", "-m", model, "-u", server.endpoints.http_url,
                    "--concurrency-range", str(c), "-o", str(out), *extra],
                   capture_output=True, check=True)  # fmt: skip
    wall = time.monotonic() - t0
    lv = RunRecord.load(out).levels[0]
    return wall, lv.throughput_infer_per_s, lv.stable, lv.precision.throughput_rel


def _pa_default(server: LocalServer, model: str, c: int) -> tuple[float, float, bool, float | None]:
    binary, env = perf_analyzer()
    t0 = time.monotonic()
    pa = subprocess.run([str(binary), "-m", model, "-u", server.endpoints.http_url, "--concurrency-range",
                         str(c), "-v"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                        env={**os.environ, **env})  # fmt: skip
    wall = time.monotonic() - t0
    passes = [float(x) for x in re.findall(r"Pass \[\d+\] throughput: ([0-9.]+) infer/sec", pa.stdout)]
    reported = _pa_float(pa.stdout, r"Throughput: ([0-9.]+) infer/sec") or 0.0
    stable = "failed to obtain stable" not in pa.stdout.lower() and reported > 0
    return wall, reported, stable, mean_ci_rel(passes[-3:])  # it reports the mean of its last 3 passes


def time_to_stable(server: LocalServer, reps: int, models: list[str], targets: list[float]) -> list[dict]:
    """Each tool with its defaults, alternating, repeated: wall time per level (whole process, so
    perfkit's Python start-up counts against it), the precision each claims, and the precision it
    really has: the spread of its reported throughput over the repeated runs. `targets`: extra
    perfkit runs with -s T (a tighter precision target) beside its default."""
    rows = []
    tools: list[tuple[str, Any]] = [("perfkit", _perfkit_default), ("perf_analyzer", _pa_default)]
    tools += [(f"perfkit -s {t:g}", functools.partial(_perfkit_default, stability=t)) for t in targets]
    names = [name for name, _ in tools]
    for model in models:
        # A fresh server is slower for its first minute or so (both tools saw it): warm it up first.
        warm = run_pa(server, "http", ["--concurrency-range", "4"], 30, windows=3, model=model)
        warm.wait(120)
        for c in (1, 4):
            for r in range(reps):
                for tool, fn in tools if r % 2 == 0 else tools[::-1]:
                    wall, tput, stable, ci = fn(server, model, c)
                    rows.append({"tool": tool, "model": model, "concurrency": c, "rep": r, "wall_s": wall,
                                 "throughput": tput, "stable": stable, "claimed_ci_rel": ci})  # fmt: skip
                    print(f"  {model} c{c} {tool:13} rep {r}: {wall:5.1f} s, {tput:8.1f} infer/s, stable={stable}, "
                          f"claimed 95% CI ±{(ci or 0) * 100:.1f}%", flush=True)  # fmt: skip
    print("\nprecision = 95% half-width of one result, from the run-to-run spread (1.96 sd / mean);")
    print("covered = runs whose claimed 95% CI holds the mean of the other runs' results")
    for model in models:
        for c in (1, 4):
            summary = {tool: _spread(rows, model, c, tool) for tool in names}
            for tool, sm in summary.items():
                print(f"  => {model} c{c} {tool:13}: median {sm['wall_s']:5.1f} s per level; precision "
                      f"±{sm['precision'] * 100:.1f}% over {sm['results']} results ({sm['none']} runs no result); "
                      f"median claimed ±{sm['claimed'] * 100:.1f}%, covered {sm['covered']}")  # fmt: skip
            pa = summary["perf_analyzer"]
            for tool in (n for n in names if n != "perf_analyzer"):
                pk = summary[tool]
                print(f"     {model} c{c} {tool} / perf_analyzer: time {pk['wall_s'] / pa['wall_s']:.2f}, "
                      f"precision {pk['precision'] / pa['precision']:.2f} (below 1 = perfkit tighter)")  # fmt: skip
    return rows


def _spread(rows: list[dict], model: str, c: int, tool: str) -> dict:
    pick = [r for r in rows if r["tool"] == tool and r["model"] == model and r["concurrency"] == c]
    got = [r for r in pick if r["throughput"] > 0]  # a run with no result has no value
    t = [r["throughput"] for r in got]
    precision = 1.96 * statistics.stdev(t) / statistics.mean(t) if len(t) > 1 else float("nan")
    covered = 0
    for i, r in enumerate(got):
        others = statistics.mean(t[:i] + t[i + 1 :]) if len(t) > 1 else r["throughput"]
        covered += abs(r["throughput"] - others) <= (r["claimed_ci_rel"] or 0) * r["throughput"]
    claimed = statistics.median(r["claimed_ci_rel"] or 0 for r in got) if got else float("nan")
    return {"wall_s": statistics.median(r["wall_s"] for r in pick), "precision": precision, "results": len(t),
            "none": len(pick) - len(t), "claimed": claimed, "covered": f"{covered}/{len(got)}"}  # fmt: skip


def summarize_closed(rows: list[dict]) -> float:
    """Print the ratios; return the HTTP capacity seen (the higher tool's median at c4)."""
    print("\nratios perfkit / perf_analyzer (median over rounds; goals: throughput >= 1.3 at c4,")
    print("client CPU per request <= 0.33):")
    capacity = 0.0
    for protocol in ("http", "grpc"):
        for c in (1, 4):
            pick = [r for r in rows if r["protocol"] == protocol and r["concurrency"] == c]
            pk = statistics.median(r["rps"] for r in pick if r["tool"] == "perfkit")
            pa = statistics.median(r["rps"] for r in pick if r["tool"] == "perf_analyzer")
            pk_cpu = statistics.median(r["cpu_us_per_req"] for r in pick if r["tool"] == "perfkit")
            pa_cpu = statistics.median(r["cpu_us_per_req"] for r in pick if r["tool"] == "perf_analyzer")
            met = ("met" if pk / pa >= 1.3 else "NOT met") if c == 4 else "-"
            cpu_met = "met" if pk_cpu / pa_cpu <= 1 / 3 else "NOT met"
            print(f"  {protocol} c{c}: throughput {pk:7.0f} vs {pa:7.0f} = {pk / pa:.2f} (goal {met}); "
                  f"client CPU/request {pk_cpu:5.1f} vs {pa_cpu:5.1f} us = {pk_cpu / pa_cpu:.2f} "
                  f"(goal {cpu_met})")  # fmt: skip
            if c == 4:
                _ceiling(pick)
            if protocol == "http":
                capacity = max(capacity, pk, pa)
    return capacity


def _ceiling(pick: list[dict]) -> None:
    """Where the server stands at c4: its CPU per request under each tool, and how busy the model's one
    instance was (compute time per second). An instance computing nearly all the time is the wall: a
    client can raise throughput further only by leaving the server's threads more CPU."""
    fig = {t: [r for r in pick if r["tool"] == t] for t in ("perfkit", "perf_analyzer")}
    server_us = {t: statistics.median(r["server_cpu_us_per_req"] for r in rs) for t, rs in fig.items()}
    busy = {t: statistics.median(r["instance_busy"] for r in rs) for t, rs in fig.items()}
    pk_us, pa_us = server_us["perfkit"], server_us["perf_analyzer"]
    print(
        f"       server CPU/request {pk_us:5.1f} us with perfkit, {pa_us:5.1f} us with perf_analyzer; "
        f"model instance busy {busy['perfkit'] * 100:.0f}% / {busy['perf_analyzer'] * 100:.0f}% of the time"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds per configuration")
    ap.add_argument("--reps", type=int, default=5, help="repeated runs per tool for time-to-stable")
    ap.add_argument("--models", default="batcher,identity", help="models for time-to-stable (comma-separated)")
    ap.add_argument("--targets", default="", help="extra perfkit -s values for time-to-stable, e.g. 5,3")
    ap.add_argument("--json", type=Path, help="also write the raw figures here")
    ap.add_argument("--only", choices=["closed", "open", "stability", "large", "capacity"], help="run one section only")
    ap.add_argument("--capacity-seconds", type=float, default=4.0, help="seconds per capacity probe")
    ap.add_argument("--capacity-workers", type=int, default=2, help="also probe perfkit with this many --workers")
    ap.add_argument("--large-seconds", type=float, default=8.0, help="seconds per large-tensor run")
    ap.add_argument("--large-cases", default="", help="large-tensor cases to run: http,grpc,shm (default all)")
    add_version_flag(ap)
    args = ap.parse_args()
    pa_version = use_version(args.pa_version)
    repo = Path(tempfile.mkdtemp()) / "models"
    for model in {"identity", "image", *args.models.split(",")}:
        shutil.copytree(ROOT / "fixtures" / "models" / model, repo / model)
    results: dict = {"perf_analyzer_version": pa_version}
    with launch_local(LocalLaunch(repo)) as server:
        print(
            f"Triton {server.version()}, perf_analyzer {pa_version} (the anchor), identity model (16 x FP32),"
            f" {os.cpu_count()} cores shared by server and client"
        )
        if args.only in (None, "closed", "open"):
            print("closed loop (alternating, steady-state 4 s each):")
            results["closed"] = closed_loop(server, args.rounds)
            capacity = summarize_closed(results["closed"])
            if args.only in (None, "open"):
                print(f"\nopen loop (HTTP, constant rate; capacity seen above ~{capacity:.0f}/s):")
                results["open"] = open_loop(server, capacity)
        if args.only in (None, "large"):
            print("\nlarge tensors: image model, FP32 [3,224,224] (~600 KB per request), closed loop, alternating")
            results["large"] = large_tensors(server, args.rounds, args.large_seconds, args.large_cases)
        if args.only in (None, "capacity"):
            print("\ncapacity: the highest open-loop rate one client holds (HTTP, identity model)")
            results["capacity"] = client_capacity(server, args.capacity_seconds, args.capacity_workers)
        if args.only in (None, "stability"):
            print("\ntime to a stable result, each tool with its defaults (HTTP); batcher: steady 3.25 ms compute")
            print("per call (like a GPU model); identity: no compute, bound by the server's IPC wake-ups on this VM")
            results["stability"] = time_to_stable(
                server, args.reps, args.models.split(","), [float(t) for t in args.targets.split(",") if t]
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

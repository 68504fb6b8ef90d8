"""Two (or more) perfkit source trees side by side: alternating rounds on one server, one run.

Measures a change before and after in the same run: give each tree (a checkout, or a copy
made with `git archive COMMIT | tar -x -C DIR`) a name; each tree's `perfkit profile` runs
in turn at each level (the order flips every round), and its throughput and client CPU per
request are read from the outside, as benchmarks/profile_vs_perf_analyzer.py does.
Run: .venv/bin/python benchmarks/ab_trees.py before=/tmp/old after=. [--cases grpc-c1,grpc-c4] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.profile_vs_perf_analyzer import ROOT, steady, url_for  # noqa: E402
from perfkit.server import LocalLaunch, launch_local  # noqa: E402
from perfkit.server.local import LocalServer  # noqa: E402

CASES = {  # name: (model, protocol, level and options)
    "http-c1": ("identity", "http", ("--concurrency-range", "1")),
    "http-c4": ("identity", "http", ("--concurrency-range", "4")),
    "grpc-c1": ("identity", "grpc", ("--concurrency-range", "1")),
    "grpc-c4": ("identity", "grpc", ("--concurrency-range", "4")),
    "large-http-c1": ("image", "http", ("--concurrency-range", "1")),
    "large-http-c4": ("image", "http", ("--concurrency-range", "4")),
    "large-grpc-c1": ("image", "grpc", ("--concurrency-range", "1")),
    "large-grpc-c4": ("image", "grpc", ("--concurrency-range", "4")),
    # 640 KB responses (vardims doubles its input) to 640 KB requests
    "large-out-http-c1": ("vardims", "http", ("--concurrency-range", "1", "--shape", "INPUT0:40000,4")),
    "large-out-http-c4": ("vardims", "http", ("--concurrency-range", "4", "--shape", "INPUT0:40000,4")),
}


def run_tree(server: LocalServer, tree: Path, case: str, seconds: float) -> subprocess.Popen:
    model, protocol, args = CASES[case]
    out = Path(tempfile.mkdtemp()) / "run.json"
    windows = str(int(seconds))
    cmd = [sys.executable, "-m", "perfkit", "profile", "-m", model, "-u", url_for(server, protocol),
           "--admin-url", server.endpoints.http_url, "-i", protocol, *args,
           "-p", "1000", "-r", windows, "--min-windows", windows, "-o", str(out)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.Popen(cmd, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trees", nargs="+", help="NAME=DIR: a source tree holding perfkit/ (two or more)")
    ap.add_argument("--cases", default="grpc-c1,grpc-c4", help=f"comma-separated: {','.join(CASES)}")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds per case")
    ap.add_argument("--seconds", type=float, default=8.0, help="seconds per run (steady span: the middle half)")
    args = ap.parse_args()
    trees = [(n, Path(d).resolve()) for n, d in (t.split("=", 1) for t in args.trees)]
    cases = args.cases.split(",")
    repo = Path(tempfile.mkdtemp()) / "models"
    for model in {CASES[c][0] for c in cases}:
        shutil.copytree(ROOT / "fixtures" / "models" / model, repo / model)
    rows = []
    with launch_local(LocalLaunch(repo)) as server:
        print(f"Triton {server.version()}, {os.cpu_count()} cores shared by server and client")
        for case in cases:
            for r in range(args.rounds):
                for name, tree in trees if r % 2 == 0 else trees[::-1]:
                    proc = run_tree(server, tree, case, args.seconds)
                    fig = steady(server, CASES[case][0], proc, args.seconds * 0.3, args.seconds * 0.5)
                    proc.wait(120)
                    rows.append({"tree": name, "case": case, **fig})
                    print(f"  {name:10} {case:14} round {r}: {fig['rps']:8.0f} infer/s, "
                          f"{fig['cpu_us_per_req']:6.1f} us CPU/request", flush=True)  # fmt: skip
    print(f"\nmedians over rounds; ratios against {trees[0][0]}:")
    for case in cases:
        base = [r for r in rows if r["case"] == case and r["tree"] == trees[0][0]]
        b_rps, b_cpu = statistics.median(r["rps"] for r in base), statistics.median(r["cpu_us_per_req"] for r in base)
        for name, _ in trees:
            pick = [r for r in rows if r["case"] == case and r["tree"] == name]
            rps, cpu = statistics.median(r["rps"] for r in pick), statistics.median(r["cpu_us_per_req"] for r in pick)
            print(f"  {case:14} {name:10}: {rps:8.0f} infer/s ({rps / b_rps:.2f}), "
                  f"{cpu:6.1f} us CPU/request ({cpu / b_cpu:.2f})")  # fmt: skip


if __name__ == "__main__":
    main()

"""The drop-in's pace: wall time of NVIDIA's perf_analyzer QA command lines under perfkit's `perf_analyzer`
command and under perf_analyzer 2.60.0, in one run, against one bundled server on tests/pa_compat/models.

Each chosen case (tests/pa_compat/qa_cases.json) runs under both tools, alternating which goes first, so
both see the same server and the same machine load; the script writes every case's seconds, exit codes and
the per-case ratio (perfkit / perf_analyzer), and the total's, to benchmarks/results/pa_pace-<time>.json
(or --name), saved after each case, and a table of them (.md) with the machine's load average over the run.

    .venv/bin/python benchmarks/pa_pace.py                      # a handful of lines (DEFAULT_CASES)
    .venv/bin/python benchmarks/pa_pace.py --all                # every runnable case (not skipped)
    .venv/bin/python benchmarks/pa_pace.py --passed             # every case perf_analyzer 2.60 measured
    .venv/bin/python benchmarks/pa_pace.py L0_perf_analyzer:333-http ...
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._anchor import perf_analyzer  # noqa: E402
from perfkit.server import LocalLaunch, launch_local  # noqa: E402
from tests.pa_compat.record_qa import (  # noqa: E402
    CASES,
    TIMEOUT_S,
    adjacent_free_ports,
    case_argv,
    run_case,
    write_testdata,
)

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "tests" / "pa_compat"
RESULTS = ROOT / "benchmarks" / "results"
# one level at -s 100 with -b 64, a binary search over request rates under -l, a three-level concurrency
# sweep, a one-level default line and a request-rate sweep: the shapes the slow lines have
DEFAULT_CASES = (
    "L0_perf_analyzer:278-http-none",
    "L0_perf_analyzer:397-http",
    "L0_perf_analyzer:345-http",
    "L0_perf_analyzer:333-grpc",
    "L0_perf_analyzer:610-http",
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="*", help="case ids (default: DEFAULT_CASES)")
    ap.add_argument("--all", action="store_true", help="every runnable case of qa_cases.json (those not skipped)")
    ap.add_argument("--passed", action="store_true", help="every case perf_analyzer 2.60 measured when recorded")
    ap.add_argument("--name", help="the results files' name (default: pa_pace-<time>[-label])")
    ap.add_argument(
        "--perfkit-from",
        type=Path,
        help="run perfkit's `perf_analyzer` from this source tree (an export of another commit: before/after)",
    )
    ap.add_argument("--label", default="", help="a word for the results file's name (e.g. before)")
    args = ap.parse_args()
    cases = json.loads(CASES.read_text())["cases"]
    if args.all:
        chosen = [c for c in cases if not c.get("skip")]
    elif args.passed:
        chosen = [c for c in cases if not c.get("skip") and (c.get("perf_analyzer_2.60") or {}).get("returncode") == 0]
    else:
        wanted = args.cases or list(DEFAULT_CASES)
        chosen = [c for c in cases if c["id"] in wanted]
    pa_path, pa_env = perf_analyzer("2.60")
    perfkit: tuple[list[str], dict[str, str]] = ([str(Path(sys.executable).parent / "perf_analyzer")], {})
    if args.perfkit_from:
        perfkit = ([sys.executable, "-m", "perfkit.cli.pa"], {"PYTHONPATH": str(args.perfkit_from.resolve())})
    tools = {"perf_analyzer_2.60": ([str(pa_path)], pa_env), "perfkit": perfkit}
    http_port = adjacent_free_ports()
    launch = LocalLaunch(HERE / "models", http_port=http_port, grpc_port=http_port + 1)
    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H%MZ")
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{args.name or f'pa_pace-{when}' + ('-' + args.label if args.label else '')}.json"
    rows: list[dict[str, Any]] = []
    loads = [os.getloadavg()]
    with tempfile.TemporaryDirectory() as tmp, launch_local(launch) as server:
        work = Path(tmp)
        places = {
            "inputdata": str(ROOT / "tests" / "inputdata" / "files"),
            "pa_compat": str(HERE / "files"),
            "testdata": str(write_testdata(work / "test_data")),
            "models": str(HERE / "models"),
            "work": str(work),
            "tritonserver_dir": str(work / "no-tritonserver"),
        }
        for i, case in enumerate(chosen):
            argv = case_argv(case, places, server.endpoints.http_url, server.endpoints.grpc_url or "")
            order = list(tools) if i % 2 == 0 else list(reversed(tools))
            row: dict[str, Any] = {"id": case["id"], "argv": case["argv"]}
            for tool in order:
                binary, env = tools[tool]
                got = run_case(binary, argv, env, work)
                got.setdefault("seconds", float(TIMEOUT_S))  # a timeout counts its whole limit
                row[tool] = got
            pa_s, pk_s = row["perf_analyzer_2.60"]["seconds"], row["perfkit"]["seconds"]
            row["ratio"] = round(pk_s / pa_s, 2) if pa_s else None
            row["load_avg_1m"] = round(os.getloadavg()[0], 1)
            print(f"{case['id']}: perf_analyzer {pa_s} s, perfkit {pk_s} s, ratio {row['ratio']}", flush=True)
            rows.append(row)
            loads.append(os.getloadavg())
            _save(path, args, when, rows, loads, done=False)
    out = _save(path, args, when, rows, loads, done=True)
    print(
        f"total: perf_analyzer {out['total_s']['perf_analyzer_2.60']} s, perfkit {out['total_s']['perfkit']} s,"
        f" ratio {out['ratio']} -> {path}"
    )
    return 0


def _save(path: Path, args: argparse.Namespace, when: str, rows: list[dict[str, Any]],
          loads: list[tuple[float, float, float]], *, done: bool) -> dict[str, Any]:  # fmt: skip
    """The results so far (JSON and its table); returns the JSON's content."""
    pa_total = sum(r["perf_analyzer_2.60"]["seconds"] for r in rows)
    pk_total = sum(r["perfkit"]["seconds"] for r in rows)
    one_minute = [x[0] for x in loads]
    out = {
        "when": when,
        "perfkit": str(args.perfkit_from or "this checkout"),
        "complete": done,
        "machine": {
            "cpus": os.cpu_count(),
            "load_avg_1m_min": round(min(one_minute), 1),
            "load_avg_1m_max": round(max(one_minute), 1),
            "load_avg_1m_mean": round(sum(one_minute) / len(one_minute), 1),
        },  # fmt: skip
        "cases": rows,
        "total_s": {"perf_analyzer_2.60": round(pa_total, 1), "perfkit": round(pk_total, 1)},
        "ratio": round(pk_total / pa_total, 2) if pa_total else None,
    }
    path.write_text(json.dumps(out, indent=1) + "\n")
    path.with_suffix(".md").write_text(markdown(out))
    return out


def markdown(out: dict[str, Any]) -> str:
    """The run as a table: the total, then each case, slowest ratio first."""
    m = out["machine"]
    lines = [
        f"# The drop-in's pace on the perf_analyzer QA lines ({out['when']}{'' if out['complete'] else ', partial'})",
        "",
        f"perfkit's `perf_analyzer` ({out['perfkit']}) against perf_analyzer 2.60.0, each case under both in one run"
        f" against one bundled Triton 2.51 on tests/pa_compat/models; {len(out['cases'])} cases. Machine: {m['cpus']}"
        f" CPUs, shared, load average (1 min) {m['load_avg_1m_min']}-{m['load_avg_1m_max']} (mean"
        f" {m['load_avg_1m_mean']}) over the run: ratios hold within the run, seconds do not carry to another.",
        "",
        f"**Total: perf_analyzer {out['total_s']['perf_analyzer_2.60']} s, perfkit {out['total_s']['perfkit']} s,"
        f" ratio {out['ratio']}** (goal <= 1.0).",
        "",
        "| case | perf_analyzer 2.60, s (exit) | perfkit, s (exit) | ratio |",
        "|---|---|---|---|",
    ]
    for r in sorted(out["cases"], key=lambda r: -(r["ratio"] or 0)):
        pa, pk = r["perf_analyzer_2.60"], r["perfkit"]
        lines.append(f"| {r['id']} | {pa['seconds']} ({pa['returncode']}) | {pk['seconds']} ({pk['returncode']})"
                     f" | {r['ratio']} |")  # fmt: skip
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())

"""The drop-in's pace: wall time of NVIDIA's perf_analyzer QA command lines under perfkit's `perf_analyzer`
command and under perf_analyzer 2.60.0, in one run, against one bundled server on tests/pa_compat/models.

Each chosen case (tests/pa_compat/qa_cases.json) runs under both tools, alternating which goes first, so
both see the same server and the same machine load; the script writes every case's seconds, exit codes and
the per-case ratio (perfkit / perf_analyzer), and the total's, to benchmarks/results/pa_pace-<time>.json.

    .venv/bin/python benchmarks/pa_pace.py                      # a handful of lines (DEFAULT_CASES)
    .venv/bin/python benchmarks/pa_pace.py --all                # every case perf_analyzer 2.60 ran
    .venv/bin/python benchmarks/pa_pace.py L0_perf_analyzer:333-http ...
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._anchor import perf_analyzer  # noqa: E402
from perfkit.server import LocalLaunch, launch_local  # noqa: E402
from tests.pa_compat.record_qa import CASES, adjacent_free_ports, case_argv, run_case, write_testdata  # noqa: E402

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
    ap.add_argument("--all", action="store_true", help="every case perf_analyzer 2.60 measured when recorded")
    ap.add_argument(
        "--perfkit-from",
        type=Path,
        help="run perfkit's `perf_analyzer` from this source tree (an export of another commit: before/after)",
    )
    ap.add_argument("--label", default="", help="a word for the results file's name (e.g. before)")
    args = ap.parse_args()
    cases = json.loads(CASES.read_text())["cases"]
    if args.all:
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
    rows = []
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
            row: dict[str, object] = {"id": case["id"], "argv": case["argv"]}
            for tool in order:
                binary, env = tools[tool]
                row[tool] = run_case(binary, argv, env, work)
            pa_s = row["perf_analyzer_2.60"]["seconds"]  # type: ignore[index]  # run_case's outcome is a dict
            pk_s = row["perfkit"]["seconds"]  # type: ignore[index]  # run_case's outcome is a dict
            row["ratio"] = round(pk_s / pa_s, 2) if pa_s else None
            print(f"{case['id']}: perf_analyzer {pa_s} s, perfkit {pk_s} s, ratio {row['ratio']}", flush=True)
            rows.append(row)
    pa_total = sum(r["perf_analyzer_2.60"].get("seconds") or 0 for r in rows)  # type: ignore[attr-defined]  # dict
    pk_total = sum(r["perfkit"].get("seconds") or 0 for r in rows)  # type: ignore[attr-defined]  # dict
    out = {
        "when": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H%MZ"),
        "perfkit": str(args.perfkit_from or "this checkout"),
        "cases": rows,
        "total_s": {"perf_analyzer_2.60": round(pa_total, 1), "perfkit": round(pk_total, 1)},
        "ratio": round(pk_total / pa_total, 2) if pa_total else None,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"pa_pace-{out['when']}{'-' + args.label if args.label else ''}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(
        f"total: perf_analyzer {out['total_s']['perf_analyzer_2.60']} s, perfkit {out['total_s']['perfkit']} s,"
        f" ratio {out['ratio']} -> {path}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

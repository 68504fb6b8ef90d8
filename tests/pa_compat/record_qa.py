"""Run every case of qa_cases.json with the real perf_analyzer or perfkit's, and record the outcome.

    python -m tests.pa_compat.record_qa perf_analyzer   # the tritonclient 2.41.0 binary (benchmarks/_anchor.py)
    python -m tests.pa_compat.record_qa perf_analyzer_2.60   # perf_analyzer 2.60.0 (the perf-analyzer wheel)
    python -m tests.pa_compat.record_qa perfkit         # perfkit's `perf_analyzer` command
    python -m tests.pa_compat.record_qa summary         # how the command lines ended under each

Starts a local tritonserver on tests/pa_compat/models, writes the QA script's test data
directory ({testdata}: INPUT0/INPUT1 with 16 lines of "1", custom.schedule), and runs each case's
command line unchanged but for `-u` (the server's port for the protocol the line picks). Stores
{"outcome": "ok" | "error" | "timeout", "returncode", "message"} under the tool's key in each
case. Cases with a `skip` reason are not run. Not collected by pytest (about 30 minutes per tool).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from perfkit.server import LocalLaunch, launch_local

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CASES = HERE / "qa_cases.json"
TIMEOUT_S = 300


def adjacent_free_ports() -> int:
    """A port p with p and p + 1 both free on loopback."""
    import socket

    for _ in range(200):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
        return int(port)
    raise RuntimeError("no two adjacent free ports")


def write_testdata(folder: Path) -> Path:
    """The data directory L0_perf_analyzer writes: one file per input, and a request-intervals file."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("INPUT0", "INPUT1"):
        (folder / name).write_text("1\n" * 16)
    (folder / "custom.schedule").write_text("30000\n10000\n40000\n20000\n25000\n")
    return folder


def case_argv(case: dict[str, object], places: dict[str, str], http_url: str, grpc_url: str) -> list[str]:
    """The case's command line with placeholders filled and -u pointing at the test server."""
    argv = [str(a).format(**places) for a in case["argv"]]  # type: ignore[attr-defined]  # a case's "argv" is a JSON list (typed object here)
    grpc = any(a == "-i" and b.lower() == "grpc" for a, b in zip(argv, argv[1:]))
    return ["-u", grpc_url if grpc else http_url, *argv]


def first_error(text: str) -> str:
    """The first line that says what went wrong (for the record): a tool's own error line first."""
    for line in text.splitlines():
        if line.startswith(("perfkit: error:", "Error:")):
            return line.strip()[:300]
    for line in text.splitlines():
        low = line.lower()
        if "error" in low or "failed" in low or "mismatch" in low or "unknown" in low or "refused" in low:
            return line.strip()[:300]
    return text.strip().splitlines()[-1][:300] if text.strip() else ""


def run_case(binary: list[str], argv: list[str], env: dict[str, str], cwd: Path) -> dict[str, object]:
    """Run one command line; its outcome."""
    t0 = time.monotonic()
    try:
        proc = subprocess.run(
            [*binary, *argv], capture_output=True, text=True, env={**os.environ, **env}, timeout=TIMEOUT_S, cwd=cwd
        )
    except subprocess.TimeoutExpired:
        return {"outcome": "timeout", "returncode": None, "message": f"still running after {TIMEOUT_S} s"}
    text = proc.stdout + proc.stderr
    return {
        "outcome": "ok" if proc.returncode == 0 else "error",
        "returncode": proc.returncode,
        "message": "" if proc.returncode == 0 else first_error(text),
        "seconds": round(time.monotonic() - t0, 1),
    }


def _save(case_id: str, tool: str, outcome: dict[str, object]) -> None:
    # save as we go (a long recording interrupted keeps what it has); both tools may record at once
    import fcntl

    with open(Path(tempfile.gettempdir()) / "perfkit-qa_cases.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        fresh = json.loads(CASES.read_text())
        for c in fresh["cases"]:
            if c["id"] == case_id:
                c[tool] = outcome
        CASES.write_text(json.dumps(fresh, indent=1) + "\n")


def summary(cases: list[dict[str, object]]) -> str:
    """How the command lines ended under each tool (measured: exit 0, or 2 for "did not stabilise")."""
    from collections import Counter

    def end(o: object) -> str:
        if not isinstance(o, dict):
            return "not run"
        rc = o.get("returncode")
        return "measured" if rc in (0, 2) else ("timeout" if rc is None else "error")

    skipped = Counter(str(c["skip"]) for c in cases if c.get("skip"))
    run = [c for c in cases if not c.get("skip")]
    lines = [f"{len(cases)} command lines: {len(run)} run, {sum(skipped.values())} not run"]
    lines += [f"  not run: {n} ({why})" for why, n in skipped.items()]
    anchors = [t for t in ("perf_analyzer", "perf_analyzer_2.60") if any(t in c for c in run)]
    for anchor in anchors:
        both = [c for c in run if anchor in c and "perfkit" in c]
        pairs = Counter((end(c.get(anchor)), end(c.get("perfkit"))) for c in both)
        same = sum(n for (a, b), n in pairs.items() if a == b)
        lines += [f"  {anchor} {a}, perfkit {b}: {n}" for (a, b), n in sorted(pairs.items())]
        lines.append(f"  same outcome as {anchor}: {same} of {len(both)}")
    for tool in (*anchors, "perfkit"):
        ran = [c for c in run if tool in c]
        as_qa = sum(end(c.get(tool)) == ("measured" if c["qa_expects"] == "ok" else "error") for c in ran)
        lines.append(f"  {tool} ended as the QA script expects: {as_qa} of {len(ran)}")
    return "\n".join(lines)


def main() -> int:
    tool = sys.argv[1]
    if tool == "summary":
        print(summary(json.loads(CASES.read_text())["cases"]))
        return 0
    only = set(sys.argv[2:])
    if tool.startswith("perf_analyzer"):
        # "perf_analyzer" is the 2.41.0 binary the cases were first recorded with; "perf_analyzer_2.60" the newest
        sys.path.insert(0, str(ROOT))
        from benchmarks._anchor import perf_analyzer

        path, env = perf_analyzer(tool.partition("_2.")[2] and "2." + tool.partition("_2.")[2] or "2.41")
        binary = [str(path)]
    else:
        binary, env = [str(Path(sys.executable).parent / "perf_analyzer")], {}
    doc = json.loads(CASES.read_text())
    # adjacent HTTP and gRPC ports, as Triton's defaults (8000, 8001): perfkit reads metadata over HTTP at
    # the gRPC port - 1 unless told otherwise (README, "Differences from perf_analyzer")
    http_port = adjacent_free_ports()
    launch = LocalLaunch(HERE / "models", http_port=http_port, grpc_port=http_port + 1)
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
        grpc_url = server.endpoints.grpc_url or ""
        for case in doc["cases"]:
            if (only and case["id"] not in only) or case.get("skip"):
                continue
            argv = case_argv(case, places, server.endpoints.http_url, grpc_url)
            case[tool] = run_case(binary, argv, env, work)
            print(case["id"], case[tool], file=sys.stderr, flush=True)
            _save(case["id"], tool, case[tool])
    return 0


if __name__ == "__main__":
    sys.exit(main())

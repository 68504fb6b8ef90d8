"""Run the real perf_analyzer's --periodic-concurrency-range command lines and record what it did.

    python -m tests.pa_compat.record_periodic [perf_analyzer|perfkit]

Each case of periodic_cases.json runs against the `streamer` fixture model (decoupled, 8 responses
and a flag-only final one per request with files/streamer_8_tokens.json) on the bundled Triton; its
outcome, and for a run that ended well the facts of its --profile-export-file (`export_facts`), are
stored under the tool's name. tests/server/cli/test_pa_periodic.py holds perfkit to perf_analyzer's. Not
collected by pytest: it is how the recorded outcomes were obtained.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks._anchor import perf_analyzer
from perfkit.server import LocalLaunch, launch_local
from tests.pa_compat.record_qa import adjacent_free_ports, run_case

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CASES = HERE / "periodic_cases.json"


def export_facts(path: Path) -> dict[str, Any]:
    """What a periodic run's export must show: its experiment, its requests and how the ramp went."""
    doc = json.loads(path.read_text())
    (exp,) = doc["experiments"]
    reqs = sorted(exp["requests"], key=lambda r: r["timestamp"])
    # requests in flight just after each send: the ramp
    ramp = [sum(1 for q in reqs if q["timestamp"] <= r["timestamp"] < q["response_timestamps"][-1]) for r in reqs]
    return {
        "experiment": exp["experiment"],
        "window_boundaries": exp["window_boundaries"],
        "requests": len(reqs),
        "responses_per_request": sorted({len(r["response_timestamps"]) for r in reqs}),
        "peak_in_flight": max(ramp, default=0),
    }


def case_argv(case: dict[str, Any], grpc_url: str, export: Path) -> list[str]:
    places = {"pa_compat": str(HERE / "files"), "export": str(export)}
    return ["-u", grpc_url, *(a.format(**places) for a in case["argv"])]


def main() -> int:
    tool = sys.argv[1] if len(sys.argv) > 1 else "perf_analyzer"
    if tool == "perf_analyzer":
        binary, env = perf_analyzer("2.41")  # the recorded outcomes are tritonclient 2.41.0's
        cmd = [str(binary)]
    else:
        cmd, env = [str(ROOT / ".venv" / "bin" / "perf_analyzer")], {}
    doc = json.loads(CASES.read_text())
    port = adjacent_free_ports()
    launch = LocalLaunch(ROOT / "fixtures" / "models", models=("streamer",), http_port=port, grpc_port=port + 1)
    with tempfile.TemporaryDirectory() as tmp, launch_local(launch) as server:
        grpc_url = server.endpoints.grpc_url or f"127.0.0.1:{port + 1}"
        for case in doc["cases"]:
            export = Path(tmp) / f"{case['id']}.json"
            outcome = run_case(cmd, case_argv(case, grpc_url, export), env, Path(tmp))
            if outcome["outcome"] == "ok" and export.exists():
                outcome["export_facts"] = export_facts(export)
            case[tool] = outcome
            print(case["id"], outcome, flush=True)
    CASES.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

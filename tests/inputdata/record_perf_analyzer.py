"""Run the real perf_analyzer on every case of manifest.json and record its outcome there.

    python -m tests.inputdata.record_perf_analyzer

Starts a local tritonserver on tests/inputdata/models, runs perf_analyzer (the tritonclient
2.41.0 wheel's binary, see benchmarks/_anchor.py) once per case with a short, always-stable
measurement, and stores {"outcome": "ok" | "error", "message": first error line} in each case.
Not collected by pytest: it is how the recorded outcomes were obtained.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from benchmarks._anchor import perf_analyzer
from perfkit.server import LocalLaunch, launch_local

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "manifest.json"


def _first_error(text: str) -> str:
    for line in text.splitlines():
        low = line.lower()
        if "error" in low or "failed" in low or "mismatch" in low or "expected" in low:
            return line.strip()
    return text.strip().splitlines()[-1] if text.strip() else ""


def main() -> int:
    binary, env = perf_analyzer("2.41")  # the recorded outcomes are tritonclient 2.41.0's
    doc = json.loads(MANIFEST.read_text())
    with launch_local(LocalLaunch(HERE / "models")) as server:
        for case in doc["cases"]:
            if case["model"] is None:  # no server can load such a model here (see its reason)
                continue
            cmd = [
                str(binary),
                "-m",
                case["model"],
                "-u",
                server.endpoints.http_url,
                "--input-data",
                str(HERE / "files" / case["file"]),
                "-b",
                str(case["batch_size"]),
                "--concurrency-range",
                "1",
                "--measurement-mode",
                "count_windows",
                "--measurement-request-count",
                "20",
                "--stability-percentage",
                "999",
            ]
            for shape in case["shapes"]:
                cmd += ["--shape", shape]
            proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env}, timeout=120)
            text = proc.stdout + proc.stderr
            outcome = "ok" if proc.returncode == 0 else "error"
            case["perf_analyzer"] = {
                "outcome": outcome,
                "returncode": proc.returncode,
                "message": "" if outcome == "ok" else _first_error(text),
            }
            print(case["id"], case["perf_analyzer"], file=sys.stderr)
    MANIFEST.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

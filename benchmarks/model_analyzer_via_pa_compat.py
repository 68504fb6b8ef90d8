"""model_analyzer driving perfkit's `perf_analyzer` command on a fixture model.

    python -m venv /tmp/ma && /tmp/ma/bin/pip install triton-model-analyzer==1.58.0
    .venv/bin/python benchmarks/model_analyzer_via_pa_compat.py --model-analyzer /tmp/ma/bin/model-analyzer

Launches the bundled Triton on fixtures/models (adjacent HTTP/gRPC ports, as Triton's defaults),
runs `model-analyzer profile` in remote mode with `--perf-analyzer-path` pointing at perfkit's
`perf_analyzer` (through a wrapper that logs each command line model_analyzer gives it), and
prints those command lines and model_analyzer's result table. model_analyzer lives in its own
environment (it pins its own dependencies); a run takes one to two minutes, so this is a
benchmark script, not a CI test. Exit 0 when model_analyzer produced its results table.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perfkit.server import LocalLaunch, launch_local  # noqa: E402
from tests.pa_compat.record_qa import adjacent_free_ports  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-analyzer", required=True, help="the model-analyzer executable (its own venv)")
    ap.add_argument("--model", default="sleeper", help="fixture model to profile (default: sleeper)")
    args = ap.parse_args()
    pa = Path(sys.executable).parent / "perf_analyzer"
    if not pa.exists():
        print(f"{pa} is missing: pip install -e '.[pa-compat]'", file=sys.stderr)
        return 2
    port = adjacent_free_ports()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        calls = work / "pa-calls.log"
        wrapper = work / "perf_analyzer"
        wrapper.write_text(f'#!/bin/sh\necho "perf_analyzer $*" >> {calls}\nexec {pa} "$@"\n')
        wrapper.chmod(0o755)
        launch = LocalLaunch(ROOT / "fixtures" / "models", models=(args.model,), http_port=port, grpc_port=port + 1)
        with launch_local(launch) as server:
            cmd = [
                args.model_analyzer, "profile",
                "--model-repository", str(ROOT / "fixtures" / "models"),
                "--profile-models", args.model,
                "--triton-launch-mode", "remote",
                "--triton-http-endpoint", f"localhost:{port}",
                "--triton-grpc-endpoint", f"localhost:{port + 1}",
                "--triton-metrics-url", server.endpoints.metrics_url,
                "--perf-analyzer-path", str(wrapper),
                "--run-config-search-disable",
                "--client-protocol", "grpc",
                "--checkpoint-directory", str(work / "ckpt"),
                "--output-model-repository-path", str(work / "out"),
                "--override-output-model-repository",
                "--export-path", str(work),
            ]  # fmt: skip
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=work, timeout=900)
        print("model_analyzer ran perf_analyzer as:")
        print(calls.read_text() if calls.exists() else "  (never)")
        table = next(work.rglob("metrics-model-inference.csv"), None)
        if proc.returncode != 0 or table is None:
            print(proc.stdout[-3000:], proc.stderr[-3000:], sep="\n", file=sys.stderr)
            print(f"model_analyzer exited {proc.returncode}; results table: {table}", file=sys.stderr)
            return 1
        print(f"model_analyzer's results ({table.name}):")
        print(table.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env bash
# The README's main job, end to end on the embedded default: installs perfkit with the
# bundled Triton, launches it on a copy of the fixture models, profiles, tunes the
# batch-aware model within a 20 ms p99 budget, and writes the HTML report.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/perfkit run sweeps/demo.toml "$@"
echo
echo "demo: run records and tune results are in .perfkit/demo/, the HTML report is reports/demo.html"

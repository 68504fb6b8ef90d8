#!/usr/bin/env bash
# The README's test command: set up everything, then run the whole test suite
# (real Triton server included). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/system-deps.sh
set +e
.venv/bin/python -m pytest "$@"
rc=$?
set -e
if [ "$rc" = 5 ]; then
  echo "test.sh: pytest collected no tests" >&2
  exit 1
fi
exit "$rc"

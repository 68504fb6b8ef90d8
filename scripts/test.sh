#!/usr/bin/env bash
# The README's test command: set up everything, then run the whole test suite
# (real Triton server included). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/system-deps.sh
set +e
# Several workers (pytest-xdist): most tests wait on real servers and measurement windows rather
# than compute. Each test file runs on one worker (the Ray and Docker users on one: tests/conftest.py),
# in collection order so the long server files start first. PERFKIT_TEST_WORKERS=0: one process.
.venv/bin/python -m pytest -n "${PERFKIT_TEST_WORKERS:-3}" --dist loadfile --no-loadscope-reorder "$@"
rc=$?
set -e
if [ "$rc" = 5 ]; then
  echo "test.sh: pytest collected no tests" >&2
  exit 1
fi
exit "$rc"

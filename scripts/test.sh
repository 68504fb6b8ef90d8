#!/usr/bin/env bash
# The README's test command: set up everything, then run the whole test suite
# (real Triton server included). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/system-deps.sh
# Several workers (pytest-xdist): most tests wait on real servers and measurement windows rather
# than compute. Each test file runs on one worker (the Ray and Docker users on one: tests/conftest.py),
# in collection order so the long server files start first. Tests marked `quiet` assert a verdict on
# measurement noise or a latency budget: they run afterwards, alone, on a machine nothing else loads.
# A test that fails in the parallel run is listed and run once more alone; failing alone fails the suite.
# PERFKIT_TEST_WORKERS=0: everything in one process; a -m or -k of your own: one run of what it selects.
workers="${PERFKIT_TEST_WORKERS:-3}"
pytest=(.venv/bin/python -m pytest)
own_selection=0
for arg in "$@"; do
  case "$arg" in -m | -k | -m* | -k*) own_selection=1 ;; esac
done
set +e
if [ "$workers" = 0 ]; then
  "${pytest[@]}" "$@"
  rc=$?
elif [ "$own_selection" = 1 ]; then
  "${pytest[@]}" -n "$workers" --dist loadfile --no-loadscope-reorder "$@"
  rc=$?
else
  failed_list=$(mktemp)
  PERFKIT_FAILED_LIST="$failed_list" "${pytest[@]}" -n "$workers" --dist loadfile --no-loadscope-reorder -m "not quiet" "$@"
  rc_parallel=$?
  echo "test.sh: the quiet tests, alone"
  "${pytest[@]}" -m quiet "$@"
  rc_quiet=$?
  # A test that failed beside other workers is judged again alone, as the suite ran before it was
  # parallel; it is listed here either way, and it fails the suite if it fails alone too.
  mapfile -t failed < <(sort -u "$failed_list")
  rm -f "$failed_list"
  if [ "$rc_parallel" = 1 ] && [ "${#failed[@]}" -gt 0 ]; then
    echo "test.sh: ${#failed[@]} test(s) failed in the parallel run; each again, alone:"
    printf '  %s\n' "${failed[@]}"
    "${pytest[@]}" "$@" -- "${failed[@]}"
    rc_parallel=$?
  fi
  if [ "$rc_parallel" = 5 ] && [ "$rc_quiet" = 5 ]; then
    rc=5
  elif [ "$rc_parallel" != 0 ] && [ "$rc_parallel" != 5 ]; then
    rc=$rc_parallel
  elif [ "$rc_quiet" != 0 ] && [ "$rc_quiet" != 5 ]; then
    rc=$rc_quiet
  else
    rc=0
  fi
fi
set -e
if [ "$rc" = 5 ]; then
  echo "test.sh: pytest collected no tests" >&2
  exit 1
fi
exit "$rc"

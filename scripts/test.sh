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
# A test that fails in either run is listed and run once more alone; failing alone fails the suite.
# PERFKIT_TEST_WORKERS=0: everything in one process; a -m or -k of your own: one run of what it selects.
workers="${PERFKIT_TEST_WORKERS:-3}"
pytest=(.venv/bin/python -m pytest)
args=("$@")
own_selection=0
for arg in "$@"; do
  case "$arg" in -m | -k | -m* | -k*) own_selection=1 ;; esac
done

# Runs the tests a run listed as failed (the file $2, written by tests/conftest.py) once more, alone,
# within the run's marker selection $1; prints their ids and returns pytest's exit code. An id pytest
# cannot find again (its exit 4, a usage error: a parameter's id that changed since, say) is run by
# its test function, then by its file; a failure that cannot be run again at all stands (1).
run_again_alone() {
  local marker="$1" ids=() rc by
  mapfile -t ids < <(grep '^tests/' "$2" | sort -u)
  if [ "${#ids[@]}" = 0 ]; then
    echo "test.sh: the $3 run failed with no test of this suite listed; it stands" >&2
    return 1
  fi
  echo "test.sh: ${#ids[@]} test(s) failed in the $3 run; each again, alone:"
  printf '  %s\n' "${ids[@]}"
  "${pytest[@]}" -m "$marker" "${args[@]}" -- "${ids[@]}"
  rc=$?
  for by in function file; do
    [ "$rc" = 4 ] || break
    if [ "$by" = function ]; then
      mapfile -t ids < <(printf '%s\n' "${ids[@]}" | sed 's/\[.*$//' | sort -u)
    else
      mapfile -t ids < <(printf '%s\n' "${ids[@]}" | sed 's/::.*$//' | grep -v '^$' | sort -u)
    fi
    echo "test.sh: pytest did not find every id again; by test $by:"
    printf '  %s\n' "${ids[@]}"
    "${pytest[@]}" -m "$marker" "${args[@]}" -- "${ids[@]}"
    rc=$?
  done
  if [ "$rc" = 4 ]; then
    echo "test.sh: pytest could not run them again; their failure in the $3 run stands" >&2
    rc=1
  fi
  return "$rc"
}

set +e
if [ "$workers" = 0 ]; then
  "${pytest[@]}" "$@"
  rc=$?
elif [ "$own_selection" = 1 ]; then
  "${pytest[@]}" -n "$workers" --dist loadfile --no-loadscope-reorder "$@"
  rc=$?
else
  failed_parallel=$(mktemp)
  failed_quiet=$(mktemp)
  PERFKIT_FAILED_LIST="$failed_parallel" "${pytest[@]}" -n "$workers" --dist loadfile --no-loadscope-reorder -m "not quiet" "$@"
  rc_parallel=$?
  echo "test.sh: the quiet tests, alone"
  PERFKIT_FAILED_LIST="$failed_quiet" "${pytest[@]}" -m quiet "$@"
  rc_quiet=$?
  # A test that failed beside other workers, or a quiet test that failed once, is judged again
  # alone (a quiet test's verdict on noise can meet a noisy moment); it is listed here either way,
  # and it fails the suite if it fails again. Only a run whose tests failed (pytest's 1) is re-run:
  # another code (interrupted, internal or usage error) stands as it is.
  if [ "$rc_parallel" = 1 ] && [ -s "$failed_parallel" ]; then
    run_again_alone "not quiet" "$failed_parallel" parallel
    rc_parallel=$?
  fi
  if [ "$rc_quiet" = 1 ] && [ -s "$failed_quiet" ]; then
    run_again_alone quiet "$failed_quiet" quiet
    rc_quiet=$?
  fi
  rm -f "$failed_parallel" "$failed_quiet"
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

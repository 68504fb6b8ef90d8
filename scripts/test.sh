#!/usr/bin/env bash
# The README's test command: set up everything, then run the whole test suite
# (real Triton server included). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/system-deps.sh
bash scripts/llm-deps.sh  # llama.cpp (built once per machine, cached) and the Gemma weights: tests/server/llm
# Several workers (pytest-xdist): most tests wait on real servers and measurement windows rather
# than compute. Each test file runs on one worker (the Ray and Docker users on one: tests/conftest.py),
# in collection order so the long server files start first. Tests marked `quiet` assert a verdict on
# measurement noise or a latency budget: they run afterwards, alone, on a machine nothing else loads.
# A failed test marked `quiet` or `flaky(reason=...)` (a known race, with what would fix it) is run once
# more alone; a pass there is listed in $PERFKIT_TEST_REPORTS/flaky.txt (id, reason, run) and in its
# JUnit XML (property flaky_rerun); failing again fails the suite. Any other failure fails the suite.
# PERFKIT_TEST_WORKERS=0: everything in one process; a -m or -k of your own: one run of what it selects.
# Each run's JUnit XML: $PERFKIT_TEST_REPORTS/junit-<run>.xml (default folder: test-reports).
workers="${PERFKIT_TEST_WORKERS:-3}"
reports="${PERFKIT_TEST_REPORTS:-test-reports}"
mkdir -p "$reports"
reports="$(cd "$reports" && pwd)"
flaky_list="$reports/flaky.txt"
: >"$flaky_list"
pytest=(.venv/bin/python -m pytest)
args=("$@")
own_selection=0
for arg in "$@"; do
  case "$arg" in -m | -k | -m* | -k*) own_selection=1 ;; esac
done

# The ids of the file $1 (written by tests/support/reruns.py) whose lines are of kind $2, sorted.
listed() {
  awk -F'\t' -v kind="$2" '$1 == kind && $2 ~ /^tests\// {print $2}' "$1" | LC_ALL=C sort -u
}

# Judges the tests the run $3 listed as failed (the file $2) within its marker selection $1: those marked
# quiet or flaky are run once more, alone (PERFKIT_RERUN makes the plugin record a pass); any other stands.
# Returns 0 only when no failure stands. An id pytest cannot find again (its exit 4, a usage error: a
# parameter's id that changed since, say) is run by its test function, then by its file (only its quiet
# and flaky tests: the marker selection); a failure that cannot be run again at all stands (1).
run_again_alone() {
  local marker="($1) and (quiet or flaky)" run="$3" failed=() ids=() stand=() again=() rc by
  mapfile -t failed < <(listed "$2" failed)
  if [ "${#failed[@]}" = 0 ]; then
    echo "test.sh: the $run run failed with no test of this suite listed; it stands" >&2
    return 1
  fi
  mapfile -t ids < <(LC_ALL=C comm -12 <(printf '%s\n' "${failed[@]}") <(listed "$2" may-rerun))
  mapfile -t stand < <(LC_ALL=C comm -23 <(printf '%s\n' "${failed[@]}") <(listed "$2" may-rerun))
  if [ "${#stand[@]}" != 0 ]; then
    echo "test.sh: ${#stand[@]} test(s) failed in the $run run, not marked quiet or flaky: each fails the suite:"
    printf '  %s\n' "${stand[@]}"
  fi
  [ "${#ids[@]}" = 0 ] && return 1
  echo "test.sh: ${#ids[@]} test(s) marked quiet or flaky failed in the $run run; each again, alone:"
  printf '  %s\n' "${ids[@]}"
  again=("${pytest[@]}" -m "$marker" --junitxml="$reports/junit-rerun-$run.xml" "${args[@]}" --)
  PERFKIT_RERUN="$run" PERFKIT_FLAKY_LIST="$flaky_list" "${again[@]}" "${ids[@]}"
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
    PERFKIT_RERUN="$run" PERFKIT_FLAKY_LIST="$flaky_list" "${again[@]}" "${ids[@]}"
    rc=$?
  done
  if [ "$rc" = 4 ] || [ "$rc" = 5 ]; then
    echo "test.sh: pytest could not run them again; their failure in the $run run stands" >&2
    rc=1
  fi
  if [ "${#stand[@]}" != 0 ]; then
    return 1
  fi
  return "$rc"
}

set +e
if [ "$workers" = 0 ]; then
  "${pytest[@]}" --junitxml="$reports/junit.xml" "$@"
  rc=$?
elif [ "$own_selection" = 1 ]; then
  "${pytest[@]}" -n "$workers" --dist loadfile --no-loadscope-reorder --junitxml="$reports/junit.xml" "$@"
  rc=$?
else
  failed_parallel=$(mktemp)
  failed_quiet=$(mktemp)
  PERFKIT_FAILED_LIST="$failed_parallel" "${pytest[@]}" -n "$workers" --dist loadfile --no-loadscope-reorder \
    -m "not quiet" --junitxml="$reports/junit-parallel.xml" "$@"
  rc_parallel=$?
  echo "test.sh: the quiet tests, alone"
  PERFKIT_FAILED_LIST="$failed_quiet" "${pytest[@]}" -m quiet --junitxml="$reports/junit-quiet.xml" "$@"
  rc_quiet=$?
  # A quiet test (its verdict on noise can meet a noisy moment) or a flaky one that failed is judged
  # again alone; it fails the suite if it fails again, and a pass is listed in flaky.txt. Any other
  # failure stands. Only a run whose tests failed (pytest's 1) is judged so: another code
  # (interrupted, internal or usage error, a collection error such as a flaky mark with no reason)
  # stands as it is.
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
if [ -s "$flaky_list" ]; then
  echo "test.sh: $(wc -l <"$flaky_list") test(s) passed only when run again alone (listed in $flaky_list)"
fi
if [ "$rc" = 5 ]; then
  echo "test.sh: pytest collected no tests" >&2
  exit 1
fi
exit "$rc"

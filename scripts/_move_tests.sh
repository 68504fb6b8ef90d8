#!/usr/bin/env bash
# Moves the test files into folders that mirror the package: tests/unit/<stage>/ (no server)
# and tests/server/<stage>/ (tests that start or use a real Triton server; a file mixing both
# kinds is in server/). git mv, so history follows. Idempotent: a file already at its new path
# is skipped, so it can be re-run after a merge brings back files at the old paths. Its last line
# lists the test files still at the top of tests/.
set -euo pipefail
cd "$(dirname "$0")/.."

package() {  # a folder of tests, importable as tests.<...> (test files import each other's helpers)
  mkdir -p "$1"
  if [ ! -e "$1/__init__.py" ]; then
    : >"$1/__init__.py"
    git add "$1/__init__.py"
  fi
}

move() {  # move OLD NEW
  local old=$1 new=$2
  if [ ! -e "$old" ]; then
    [ -e "$new" ] || echo "_move_tests: neither $old nor $new exists" >&2
    return 0
  fi
  if [ -e "$new" ]; then
    echo "_move_tests: both $old and $new exist; merge them by hand" >&2
    return 0
  fi
  package "$(dirname "$new")"
  git mv "$old" "$new"
}

package tests/unit
package tests/server
move tests/test_architecture.py tests/unit/test_architecture.py
move tests/test_harness.py tests/unit/test_harness.py
move tests/test_server_marker.py tests/unit/test_server_marker.py
move tests/test_sweep.py tests/unit/campaign/test_sweep.py
move tests/test_cli_basics.py tests/unit/cli/test_cli_basics.py
move tests/test_distributed_cli.py tests/unit/cli/test_distributed_cli.py
move tests/test_first_screen.py tests/unit/cli/test_first_screen.py
move tests/test_pa_flags.py tests/unit/cli/test_pa_flags.py
move tests/test_distributed_merge.py tests/unit/distributed/test_distributed_merge.py
move tests/test_compare_core.py tests/unit/gate/test_compare_core.py
move tests/test_gate_cli.py tests/unit/gate/test_gate_cli.py
move tests/test_gate_verdicts.py tests/unit/gate/test_gate_verdicts.py
move tests/test_streaming_gate.py tests/unit/gate/test_streaming_gate.py
move tests/test_history.py tests/unit/history/test_history.py
move tests/test_inputs_units.py tests/unit/loadgen/test_inputs_units.py
move tests/test_stream_transport.py tests/unit/loadgen/test_stream_transport.py
move tests/test_gpu_paths.py tests/unit/measure/test_gpu_paths.py
move tests/test_pa_units.py tests/unit/measure/test_pa_units.py
move tests/test_shm_units.py tests/unit/measure/test_shm_units.py
move tests/test_streaming_units.py tests/unit/measure/test_streaming_units.py
move tests/test_precision.py tests/unit/recorder/test_precision.py
move tests/test_recorder.py tests/unit/recorder/test_recorder.py
move tests/test_records_typed.py tests/unit/records/test_records_typed.py
move tests/test_report_browser.py tests/unit/report/test_report_browser.py
move tests/test_report_figures.py tests/unit/report/test_report_figures.py
move tests/test_report_pages.py tests/unit/report/test_report_pages.py
move tests/test_streaming_report.py tests/unit/report/test_streaming_report.py
move tests/test_modelconfig.py tests/unit/server/test_modelconfig.py
move tests/test_store.py tests/unit/store/test_store.py
move tests/test_corpus.py tests/unit/tuner/test_corpus.py
move tests/test_pipeline_plan.py tests/unit/tuner/test_pipeline_plan.py
move tests/test_tune_confirm_units.py tests/unit/tuner/test_tune_confirm_units.py
move tests/test_tune_no_noop.py tests/unit/tuner/test_tune_no_noop.py
move tests/test_tune_seed.py tests/unit/tuner/test_tune_seed.py
move tests/test_tune_space.py tests/unit/tuner/test_tune_space.py
move tests/test_tune_stream_units.py tests/unit/tuner/test_tune_stream_units.py
move tests/test_tune_units.py tests/unit/tuner/test_tune_units.py
move tests/test_campaign.py tests/server/campaign/test_campaign.py
move tests/test_defaults.py tests/server/cli/test_defaults.py
move tests/test_pa_conformance.py tests/server/cli/test_pa_conformance.py
move tests/test_pa_periodic.py tests/server/cli/test_pa_periodic.py
move tests/test_pa_request_count.py tests/server/cli/test_pa_request_count.py
move tests/test_signals.py tests/server/cli/test_signals.py
move tests/test_distributed.py tests/server/distributed/test_distributed.py
move tests/test_distributed_tune.py tests/server/distributed/test_distributed_tune.py
move tests/test_gate_server.py tests/server/gate/test_gate_server.py
move tests/test_history_server.py tests/server/history/test_history_server.py
move tests/test_live_metrics.py tests/server/live/test_live_metrics.py
move tests/test_faults.py tests/server/loadgen/test_faults.py
move tests/test_inputdata.py tests/server/loadgen/test_inputdata.py
move tests/test_mix.py tests/server/loadgen/test_mix.py
move tests/test_native_sender.py tests/server/loadgen/test_native_sender.py
move tests/test_native_stream.py tests/server/loadgen/test_native_stream.py
move tests/test_stream_faults.py tests/server/loadgen/test_stream_faults.py
move tests/test_stream_headers.py tests/server/loadgen/test_stream_headers.py
move tests/test_tls.py tests/server/loadgen/test_tls.py
move tests/test_profile.py tests/server/measure/test_profile.py
move tests/test_progress_events.py tests/server/measure/test_progress_events.py
move tests/test_streaming_server.py tests/server/measure/test_streaming_server.py
move tests/test_report_end_to_end.py tests/server/report/test_report_end_to_end.py
move tests/test_docker_mode.py tests/server/server/test_docker_mode.py
move tests/test_launcher.py tests/server/server/test_launcher.py
move tests/test_mix_tune.py tests/server/tuner/test_mix_tune.py
move tests/test_pipeline_tune.py tests/server/tuner/test_pipeline_tune.py
move tests/test_plan.py tests/server/tuner/test_plan.py
move tests/test_tune_open_loop.py tests/server/tuner/test_tune_open_loop.py
move tests/test_tune_probe.py tests/server/tuner/test_tune_probe.py
move tests/test_tune_run.py tests/server/tuner/test_tune_run.py
move tests/test_tune_shared.py tests/server/tuner/test_tune_shared.py
move tests/test_tune_stream_run.py tests/server/tuner/test_tune_stream_run.py

left=$(cd tests && { ls test_*.py 2>/dev/null || true; } | tr "\n" " ")
echo "_move_tests: test files still at the top of tests/: ${left:-none}"

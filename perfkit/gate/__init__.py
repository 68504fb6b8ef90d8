"""Gate stage: decide, from two run records, whether serving got slower. Pure over records.

compare_runs() (the one comparison core: the gate and the comparison report render it)
judges every load level and metric (throughput, latency percentiles)
against thresholds, with a seeded bootstrap over the per-window samples for
significance; verdicts pass / regression / improvement / inconclusive / invalid map
to exit codes 0 / 10 / 0 / 11 / 12 (gate_failure() is a failing gate's error). stored_gate()
compares two stored runs; gate.ab's ab_gate() (the one part that touches a server) measures
baseline and candidate configs alternately in one job and compares them.
"""

from perfkit.gate._mix import mix_views
from perfkit.gate._pairing import config_changes, level_key, level_label
from perfkit.gate.compare import (
    EXIT_OF,
    Finding,
    GateFailed,
    GateOptions,
    GateRefused,
    GateResult,
    compare_pair,
    compare_records,
    compare_runs,
    machine_differences,
)
from perfkit.gate.output import (
    append_step_summary,
    gate_failure,
    overall_verdict,
    render_markdown,
    render_table,
    write_json,
    write_junit,
)
from perfkit.gate.resolve import default_store_path, resolve_run, stored_gate
from perfkit.gate.stats import bootstrap_rel_diff, min_samples
from perfkit.gate.thresholds import (
    DEFAULT_JOB_NOISE_PCT,
    DEFAULT_THRESHOLDS,
    Threshold,
    parse_job_noise,
    parse_threshold,
    parse_thresholds,
)

__all__ = [
    "DEFAULT_JOB_NOISE_PCT",
    "DEFAULT_THRESHOLDS",
    "EXIT_OF",
    "Finding",
    "GateFailed",
    "GateOptions",
    "GateRefused",
    "GateResult",
    "Threshold",
    "append_step_summary",
    "bootstrap_rel_diff",
    "compare_pair",
    "mix_views",
    "compare_records",
    "compare_runs",
    "level_key",
    "level_label",
    "config_changes",
    "default_store_path",
    "gate_failure",
    "machine_differences",
    "min_samples",
    "overall_verdict",
    "parse_job_noise",
    "parse_threshold",
    "parse_thresholds",
    "render_markdown",
    "render_table",
    "resolve_run",
    "stored_gate",
    "write_json",
    "write_junit",
]

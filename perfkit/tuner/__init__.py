"""Tuner stage: search model configs for the most throughput within a latency budget.

Searches max_batch_size, dynamic batching (queue delay, preferred batch sizes), instance
count and kind, and precision (backend-aware) with Optuna; reloads the model for each
candidate instead of restarting the server; always puts the user's config back.

What is tuned is a Subject (_subject: one model, a pipeline, a traffic mix); `tune()` runs the
one trial runner over whichever settings name. Candidates reach the server through a
ConfigRoute (_route: the file route rewrites config.pbtxt and reloads).
"""

from perfkit.tuner._accuracy import OutputTolerance, parse_max_output_diff
from perfkit.tuner._capacity import (
    CapacityPlan,
    ReplicaEvidence,
    evidence_from_run,
    evidence_from_tune,
    judge_verification,
    parse_percent,
    parse_rate_rps,
    plan_capacity,
    verification_spec,
)
from perfkit.tuner._events import TuneEvent
from perfkit.tuner._judge import (
    BUDGET_METRICS,
    JudgeSettings,
    concurrency_levels,
    judge_trial,
    parse_duration_s,
    parse_latency_budget,
    parse_latency_ms,
)
from perfkit.tuner._pipeline import is_pipeline
from perfkit.tuner._pipeline_plan import describe_pipeline, plan_pipeline, write_pipeline_candidates
from perfkit.tuner._plan import Plan, describe, plan, render_candidate, write_candidates
from perfkit.tuner._ray import WorkerOutcome, tune_on_ray
from perfkit.tuner._route import ConfigRoute, FileRoute
from perfkit.tuner._run import tune
from perfkit.tuner._settings import SETTINGS_KEYS, TuneResult, TuneSettings, default_output_dir, parse_bytes
from perfkit.tuner._space import (
    ResolvedSpace,
    TuneSpace,
    apply_params,
    extract_params,
    grid_points,
    parse_delay_range,
    resolve,
)
from perfkit.tuner._subject import Candidate, Subject, open_subject
from perfkit.tuner._subject_mix import parse_mix_budgets

__all__ = [
    "BUDGET_METRICS",
    "CapacityPlan",
    "ReplicaEvidence",
    "evidence_from_run",
    "evidence_from_tune",
    "judge_verification",
    "parse_percent",
    "parse_rate_rps",
    "plan_capacity",
    "verification_spec",
    "SETTINGS_KEYS",
    "JudgeSettings",
    "OutputTolerance",
    "ResolvedSpace",
    "TuneResult",
    "TuneSettings",
    "TuneEvent",
    "TuneSpace",
    "WorkerOutcome",
    "apply_params",
    "concurrency_levels",
    "default_output_dir",
    "extract_params",
    "grid_points",
    "judge_trial",
    "parse_bytes",
    "parse_delay_range",
    "parse_duration_s",
    "parse_latency_budget",
    "parse_latency_ms",
    "Plan",
    "describe",
    "plan",
    "render_candidate",
    "write_candidates",
    "parse_max_output_diff",
    "resolve",
    "tune",
    "tune_on_ray",
    "is_pipeline",
    "plan_pipeline",
    "describe_pipeline",
    "write_pipeline_candidates",
    "Candidate",
    "ConfigRoute",
    "FileRoute",
    "Subject",
    "open_subject",
    "parse_mix_budgets",
]

"""Tuner stage: search model configs for the most throughput within a latency budget.

Searches max_batch_size, dynamic batching (queue delay, preferred batch sizes), instance
count and kind, and precision (backend-aware) with Optuna; reloads the model for each
candidate instead of restarting the server; always puts the user's config back.

What is tuned is a Subject (_subject: one model, a pipeline, a traffic mix); `tune()` runs the
one trial runner over whichever settings name. Candidates reach the server through a
ConfigRoute (_route: the file route rewrites config.pbtxt and reloads).
"""

from perfkit.budget import BUDGET_METRICS, Budget, parse_latency_budget, parse_mix_budgets
from perfkit.tuner._accuracy import OutputTolerance, parse_max_output_diff
from perfkit.tuner._events import TuneEvent
from perfkit.tuner._find_load import JudgeSettings, concurrency_levels
from perfkit.tuner._launch import RayPlacement, run_tune
from perfkit.tuner._pipeline import is_pipeline
from perfkit.tuner._pipeline_preview import describe_pipeline, preview_pipeline, write_pipeline_candidates
from perfkit.tuner._preview import Preview, describe, preview, render_candidate, write_candidates
from perfkit.tuner._ray import WorkerOutcome, tune_on_ray
from perfkit.tuner._route import ConfigRoute, FileRoute
from perfkit.tuner._run import tune
from perfkit.tuner._settings import SETTINGS_KEYS, TuneResult, TuneSettings, default_output_dir, parse_budget
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
from perfkit.tuner._verdict import judge_trial
from perfkit.units import parse_bytes, parse_duration_s, parse_latency_ms

__all__ = [
    "BUDGET_METRICS",
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
    "Preview",
    "describe",
    "preview",
    "render_candidate",
    "write_candidates",
    "parse_max_output_diff",
    "resolve",
    "tune",
    "tune_on_ray",
    "is_pipeline",
    "preview_pipeline",
    "describe_pipeline",
    "write_pipeline_candidates",
    "Candidate",
    "ConfigRoute",
    "FileRoute",
    "Subject",
    "open_subject",
    "Budget",
    "parse_budget",
    "RayPlacement",
    "run_tune",
    "parse_mix_budgets",
]

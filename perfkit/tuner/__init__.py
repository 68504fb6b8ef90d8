"""Tuner stage: search model configs for the most throughput within a latency budget.

Searches max_batch_size, dynamic batching (queue delay, preferred batch sizes), instance
count and kind, and precision (backend-aware) with Optuna; reloads the model for each
candidate instead of restarting the server; always puts the user's config back.

What is tuned is a Subject (_subject: one model, a pipeline, a traffic mix); `tune()` runs the
one trial runner over whichever settings name, under a search strategy (_search: measured or
predicted). Candidates reach the server through a ConfigRoute (_route: the file route rewrites
config.pbtxt and reloads). What benchmarks drive on their own is `perfkit.tuner.parts`.
"""

from perfkit.records import Budget
from perfkit.tuner._accuracy import parse_max_output_diff
from perfkit.tuner._events import TuneEvent
from perfkit.tuner._launch import RayPlacement, run_tune
from perfkit.tuner._pipeline import is_pipeline
from perfkit.tuner._pipeline_preview import describe_pipeline, preview_pipeline, write_pipeline_candidates
from perfkit.tuner._preview import describe, preview, write_candidates
from perfkit.tuner._route import ConfigRoute, FileRoute
from perfkit.tuner._run import tune
from perfkit.tuner._settings import (
    SETTINGS_KEYS,
    TUNE_SETTINGS,
    TuneResult,
    TuneSettings,
    parse_budget,
    parse_max_error_rate,
)
from perfkit.tuner._space import TuneSpace, apply_params, grid_points, resolve
from perfkit.tuner._verdict import judge_trial

__all__ = [
    # a tune, as a library call and as `perfkit tune` runs it
    "tune",
    "run_tune",
    "RayPlacement",
    "TuneSettings",
    "TuneSpace",
    "TuneResult",
    "TuneEvent",
    "SETTINGS_KEYS",
    "TUNE_SETTINGS",
    "Budget",
    "parse_budget",
    "parse_max_error_rate",
    "parse_max_output_diff",
    "ConfigRoute",
    "FileRoute",
    # the space and a trial's verdict, for benchmarks and other stages
    "apply_params",
    "grid_points",
    "resolve",
    "judge_trial",
    # the dry run (--dry-run)
    "is_pipeline",
    "describe",
    "preview",
    "write_candidates",
    "describe_pipeline",
    "preview_pipeline",
    "write_pipeline_candidates",
]

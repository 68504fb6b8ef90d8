"""The tuner's parts that benchmarks drive on their own, beside `tune()`: the load search and its
ladders, a pipeline's bundled configs, the repository guard, the space's parameter names, the
predicted search's events and study attributes, and the trial runner and predicted search that a
benchmark watches for the subject, space and predictions of a tune it runs
(benchmarks/_case_grid.py). Not the tuner's API for users (that is `perfkit.tuner`): these follow
the tuner's changes."""

from perfkit.tuner._find_load import find_load, ladder, rate_ladder, step_below
from perfkit.tuner._pipeline import split, unbundle
from perfkit.tuner._repo_guard import RepoGuard
from perfkit.tuner._search import (
    PREDICTED_ATTR,
    SIM_REQUESTS,
    Calibrated,
    PipelineCalibrated,
    PredictedSearch,
    dimension_values,
)
from perfkit.tuner._space import P_COUNT, P_DB, P_MBS
from perfkit.tuner._trial import TrialRunner

__all__ = [
    "P_COUNT",
    "P_DB",
    "P_MBS",
    "PREDICTED_ATTR",
    "SIM_REQUESTS",
    "Calibrated",
    "PipelineCalibrated",
    "PredictedSearch",
    "RepoGuard",
    "TrialRunner",
    "dimension_values",
    "find_load",
    "ladder",
    "rate_ladder",
    "split",
    "step_below",
    "unbundle",
]

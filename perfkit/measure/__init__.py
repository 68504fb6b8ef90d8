"""Measure stage: runs a ProfileSpec against a server and produces a RunRecord.

Public API:
- profile(server, spec, ...) -> RunRecord   (saved to record_path after every level)
- profile_openai(server, spec, ...) -> RunRecord  (the same against an OpenAI-compatible endpoint)
- levels_frame(record) -> pandas.DataFrame  (one row per level)
- write_csv(record, path)                   (perf_analyzer's -f columns)
- summary_table(record) -> str               (the terminal summary, one row per level)
- machine_info() -> Machine                 (the one description of the client machine)
- run_levels(spec, measurer, save, ...)     (the level loop: local profiles and perfkit.distributed's)
- progress events: LevelStarted, WindowMeasured, LevelDone (on_progress gets them; logs go to
  the "perfkit.measure" logger)
"""

from __future__ import annotations

from perfkit.measure._context import machine_info, served_config_sha256
from perfkit.measure._coverage import rerun_precision
from perfkit.measure._csv import levels_frame, write_csv
from perfkit.measure._events import (
    LevelDone,
    LevelStarted,
    PlacedWorker,
    Progress,
    ProgressEvent,
    WindowMeasured,
    WorkersPlaced,
)
from perfkit.measure._level import LevelOutcome
from perfkit.measure._loop import MeasureOne, nothing_measured, over_latency_threshold, run_levels, walk_levels
from perfkit.measure._mix import parse_mix
from perfkit.measure._openai import profile_openai, workload_check
from perfkit.measure._profile import profile
from perfkit.measure._replay import trace_mean_rate, trace_timestamps_ms
from perfkit.measure._stopping import LevelStop
from perfkit.measure._streaming import parse_goodput
from perfkit.measure._summary import summary_table
from perfkit.measure._validate import OutputMismatchError, validate_outputs

__all__ = [
    "LevelDone",
    "LevelOutcome",
    "LevelStarted",
    "LevelStop",
    "MeasureOne",
    "OutputMismatchError",
    "PlacedWorker",
    "Progress",
    "ProgressEvent",
    "WindowMeasured",
    "WorkersPlaced",
    "levels_frame",
    "parse_goodput",
    "parse_mix",
    "trace_mean_rate",
    "trace_timestamps_ms",
    "machine_info",
    "nothing_measured",
    "over_latency_threshold",
    "profile",
    "profile_openai",
    "workload_check",
    "rerun_precision",
    "run_levels",
    "served_config_sha256",
    "validate_outputs",
    "write_csv",
    "summary_table",
    "walk_levels",
]

"""The shared vocabulary: frozen dataclasses for what flows between stages.

A RunRecord is the unit of truth: everything a report or a gate needs, saved as one
versioned JSON file; a TuneRecord is a whole tune run, under its Budget. The package is a leaf: it
imports nothing from perfkit except errors, the unit parsers (a budget's '20ms') and the objective
registry (which ranks a tune's trials).
Its modules are named for what flows:

- `_load`: the load spec (ProfileSpec, LoadLevel, TlsSpec, the defaults);
- `_samples`: raw per-request samples and the request outcome codes;
- `_level`: what one level measured (latency summaries, windows, server stats, shares);
- `_machine`: where it was measured (machine, server, model as served);
- `_openai`: an OpenAI-compatible endpoint's spec and each level's check of what the server received;
- `_budget`: a latency budget and what a measured level says about it (within it, its statistic);
- `_run` / `_tune`: the run and tune records and their schemas;
- `_serial`: to and from JSON, migration helpers, atomic writes.

Every public name is re-exported here: import from `perfkit.records`, not its modules.
"""

from __future__ import annotations

from pathlib import Path

from perfkit.errors import InputError
from perfkit.records._budget import (
    BUDGET_METRICS,
    STREAM_BUDGET_METRICS,
    Budget,
    budget_label,
    check_budget_metric,
    check_percentile,
    level_budget_us,
    open_loop_shortfall,
    parse_latency_budget,
    parse_mix_budgets,
)
from perfkit.records._calibration import Calibration, CalibrationPoint
from perfkit.records._level import (
    Drift,
    FirstResponseHistogram,
    LatencySummary,
    LevelCounts,
    LevelResult,
    MetricSample,
    MixShare,
    Precision,
    ServerShare,
    ServerStats,
    StreamingSummary,
    StreamWindow,
    Window,
    WorkerShare,
)
from perfkit.records._load import (
    DEFAULT_BURST_OFF_MS,
    DEFAULT_BURST_ON_MS,
    DEFAULT_GATE_THRESHOLDS,
    DEFAULT_MIN_WINDOWS,
    DEFAULT_TAIL_PERCENTILES,
    PERCENTILE_OF_METRIC,
    PERCENTILES,
    Distribution,
    LatencyKind,
    LoadLevel,
    LoadMode,
    ProfileSpec,
    TlsSpec,
    spec_defaults,
)
from perfkit.records._machine import Machine, ModelInfo, ServerInfo
from perfkit.records._openai import (
    DEFAULT_INPUT_TOKENS_MEAN,
    DEFAULT_PROMPT_COUNT,
    ENDPOINT_PATHS,
    USAGE_TOLERANCE_REL,
    USAGE_TOLERANCE_TOKENS,
    EndpointType,
    OpenAISpec,
    WorkloadCheck,
)
from perfkit.records._run import RUN_SCHEMA, RUN_SCHEMA_VERSION, RepeatStats, RunRecord
from perfkit.records._samples import (
    GRPC_STATUS_BASE,
    STATUS_CONNECTION_CLOSED,
    STATUS_CONNECTION_REFUSED,
    STATUS_DROPPED,
    STATUS_OK,
    STATUS_PROTOCOL,
    STATUS_STREAM_ERROR,
    STATUS_UNFINISHED,
    Samples,
    status_name,
)
from perfkit.records._serial import _read_json, from_dict, to_dict
from perfkit.records._tune import (
    M_LOWER_BOUND,
    TUNE_SCHEMA,
    TUNE_SCHEMA_VERSION,
    Confirmation,
    TrialRecord,
    TuneRecord,
    marks_lower_bound,
)


def load_record(path: Path) -> RunRecord | TuneRecord:
    """Read a run record or a tune record, whichever the file is; raises InputError otherwise."""
    path = Path(path)
    data = _read_json(path, "record")
    schema = data.get("schema") if isinstance(data, dict) else None
    if schema == TUNE_SCHEMA:
        return TuneRecord.from_dict(data, source=str(path))
    if schema == RUN_SCHEMA:
        return RunRecord.from_dict(data, source=str(path))
    raise InputError(
        f"{path} is neither a perfkit run record nor a tune record (field 'schema' is {schema!r})",
        hint="give files written by 'perfkit profile -o' or folders written by 'perfkit tune -o'",
    )


__all__ = [
    "BUDGET_METRICS",
    "STREAM_BUDGET_METRICS",
    "Budget",
    "budget_label",
    "check_budget_metric",
    "check_percentile",
    "level_budget_us",
    "open_loop_shortfall",
    "parse_latency_budget",
    "parse_mix_budgets",
    "M_LOWER_BOUND",
    "marks_lower_bound",
    "Calibration",
    "DEFAULT_INPUT_TOKENS_MEAN",
    "DEFAULT_PROMPT_COUNT",
    "ENDPOINT_PATHS",
    "EndpointType",
    "OpenAISpec",
    "USAGE_TOLERANCE_REL",
    "USAGE_TOLERANCE_TOKENS",
    "WorkloadCheck",
    "CalibrationPoint",
    "Drift",
    "FirstResponseHistogram",
    "DEFAULT_GATE_THRESHOLDS",
    "DEFAULT_MIN_WINDOWS",
    "DEFAULT_BURST_ON_MS",
    "DEFAULT_BURST_OFF_MS",
    "Distribution",
    "DEFAULT_TAIL_PERCENTILES",
    "GRPC_STATUS_BASE",
    "PERCENTILES",
    "PERCENTILE_OF_METRIC",
    "RUN_SCHEMA",
    "RUN_SCHEMA_VERSION",
    "STATUS_CONNECTION_CLOSED",
    "STATUS_CONNECTION_REFUSED",
    "STATUS_DROPPED",
    "STATUS_OK",
    "STATUS_PROTOCOL",
    "STATUS_STREAM_ERROR",
    "STATUS_UNFINISHED",
    "TUNE_SCHEMA",
    "TUNE_SCHEMA_VERSION",
    "Confirmation",
    "LatencyKind",
    "LatencySummary",
    "LevelCounts",
    "LevelResult",
    "LoadLevel",
    "LoadMode",
    "Machine",
    "MetricSample",
    "MixShare",
    "ModelInfo",
    "Precision",
    "ProfileSpec",
    "RepeatStats",
    "RunRecord",
    "Samples",
    "ServerInfo",
    "ServerShare",
    "ServerStats",
    "StreamWindow",
    "StreamingSummary",
    "TlsSpec",
    "TrialRecord",
    "TuneRecord",
    "Window",
    "WorkerShare",
    "from_dict",
    "load_record",
    "spec_defaults",
    "status_name",
    "to_dict",
]

"""What the study keeps about each trial, typed: TrialState, stored as the trial's Optuna user
attributes (the study is the single source of truth for every worker sharing it) and read back
in one place. The attribute names are the stored format of a study: a study written by an earlier
perfkit resumes with these readers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from perfkit.records import LoadLevel, marks_lower_bound

Trial = optuna.Trial | FrozenTrial

# Names as stored (the rest are the field names of TrialState).
A_ORIGINAL = "is_original"
A_INTERRUPTED = "interrupted"
A_CONSTRAINTS = "constraints"
A_FAIL_REASON = "fail_reason"
A_DUPLICATE_OF = "duplicate_of"
A_REJECTED = "rejected"  # a candidate Triton would reject: never loaded, costs nothing


@dataclass(frozen=True)
class TrialState:
    """One trial as the tuner recorded it: its candidate, how it ended, what it measured."""

    params: dict[str, Any] = field(default_factory=dict)  # the searched parameters as the config holds them
    config_pbtxt: str = ""  # the candidate's text (several configs bundled for a pipeline or mix)
    config_pbtxt_sha256: str = ""
    worker: str = ""  # host:pid of the worker that measured it
    is_original: bool = False
    interrupted: bool = False  # cut short by Ctrl-C (queued again, not counted)
    rejected: bool = False
    duplicate_of: int | None = None  # answered from that trial's measurement
    fail_reason: str = ""
    constraints: dict[str, float] = field(default_factory=dict)  # <= 0 satisfied
    duration_s: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    lowest_latency_us: float | None = None
    feasible: bool = False
    load: LoadLevel | None = None  # the highest load within the budget
    throughput_infer_per_s: float | None = None
    latency_us: float | None = None
    served_config_sha256: str = ""
    output_diff: dict[str, dict[str, float | None]] = field(default_factory=dict)
    predicted_rps: float | None = None  # --search predict: the simulator's sustainable rate for this candidate

    @property
    def hardware_units(self) -> float:
        """What a per-instance / per-GPU objective divides throughput by (1 otherwise)."""
        return float(self.metrics.get("hardware_units", 1.0))

    @property
    def rate_is_lower_bound(self) -> bool:
        """Whether the figure is only a rate the config held (TrialRecord.rate_is_lower_bound, the same mark)."""
        return marks_lower_bound(self.metrics)


_NAMES = {f.name for f in fields(TrialState)}


def read(trial: Trial) -> TrialState:
    """A trial's state from its user attributes (missing ones at their defaults)."""
    ua: Mapping[str, Any] = trial.user_attrs
    kw: dict[str, Any] = {k: v for k, v in ua.items() if k in _NAMES and v is not None}
    load = ua.get("load")
    bursts = (load.get("burst_on_ms"), load.get("burst_off_ms")) if load else (None, None)
    kw["load"] = LoadLevel(load["mode"], float(load["value"]), load.get("distribution"), *bursts) if load else None
    kw["params"] = dict(ua.get("params") or {})
    kw["constraints"] = dict(ua.get(A_CONSTRAINTS) or {})
    kw["metrics"] = dict(ua.get("metrics") or {})
    kw["fail_reason"] = str(ua.get(A_FAIL_REASON, ""))
    return TrialState(**kw)


def store(trial: optuna.Trial, **values: Any) -> None:
    """Record fields of a trial's state (names of TrialState). Raises TypeError for an unknown name."""
    for name, value in values.items():
        if name not in _NAMES:
            raise TypeError(f"TrialState has no field {name!r}")
        if isinstance(value, LoadLevel):
            value = {
                "mode": value.mode,
                "value": value.value,
                "distribution": value.distribution,
                "burst_on_ms": value.burst_on_ms,
                "burst_off_ms": value.burst_off_ms,
            }
        trial.set_user_attr(name, value)


def copy_measurement(trial: optuna.Trial, same: FrozenTrial) -> None:
    """Give a repeated config its earlier trial's measurement (what was measured, not how it ran)."""
    for key in ("duration_s", "metrics", "feasible", "load", "throughput_infer_per_s", "latency_us"):
        if key in same.user_attrs:
            trial.set_user_attr(key, same.user_attrs[key])

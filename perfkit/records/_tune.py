"""The tune record: a whole tune run, its trials and their confirmations."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from perfkit import objectives
from perfkit.errors import InputError
from perfkit.objectives import ObjectiveName
from perfkit.records._calibration import Calibration
from perfkit.records._load import LoadLevel
from perfkit.records._machine import Machine
from perfkit.records._serial import _read_json, _renamed_key, _save_json, from_dict, to_dict

TUNE_SCHEMA = "perfkit.tune"
TUNE_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Confirmation:
    """A candidate re-measured before its figure is claimed (perfkit.tuner's confirmation step).

    The search reads each level once, in short windows; the claim is re-measured at its load in
    `repeats` longer runs. It holds when every repeat's percentile is within the budget; when the
    search's load fails, the next load down is confirmed instead (stepped_down). Not held: the
    candidate is demoted and never recommended.
    """

    held: bool
    load: LoadLevel  # the load the figures below were measured at
    repeats: int
    throughput_infer_per_s: float  # mean over the repeats: the claimed figure
    throughput_low: float  # ~95% interval of that mean (Student t over the repeats)
    throughput_high: float
    latency_us: float  # the worst repeat's percentile (what "held" is judged by)
    latency_ucb_us: float  # where a re-measurement as long as the confirmation reads it, at ~95%
    searched_load: LoadLevel | None = None  # the search's load, when the claim stepped down from it
    note: str = ""

    @property
    def stepped_down(self) -> bool:
        return self.searched_load is not None


# A trial metric: 1 where its figure is a lower bound (held at its start level, nothing above measured).
M_LOWER_BOUND = "rate_lower_bound"


def marks_lower_bound(metrics: dict[str, float]) -> bool:
    """Whether a trial's metrics mark its rate as a lower bound (M_LOWER_BOUND set)."""
    return metrics.get(M_LOWER_BOUND, 0.0) > 0


@dataclass(frozen=True)
class TrialRecord:
    """One tuner trial: the candidate's parameters and what it achieved within the budget."""

    number: int
    state: Literal["complete", "pruned", "failed", "running"]
    params: dict[str, Any]  # e.g. max_batch_size, dynamic_batching, max_queue_delay_us, instance_count, precision
    load: LoadLevel | None  # the highest load level whose percentile met the budget
    throughput_infer_per_s: float | None
    latency_us: float | None  # the budget percentile at that load
    feasible: bool
    fail_reason: str = ""
    config_pbtxt_sha256: str = ""  # of the candidate config.pbtxt as perfkit wrote it (canonical protobuf)
    served_config_sha256: str = ""  # of the config the server applied (ModelInfo.served_config_sha256 of its run)
    duration_s: float = 0.0
    is_original: bool = False
    metrics: dict[str, float] = field(default_factory=dict)  # every other figure, e.g. gpu_memory_bytes
    confirmation: Confirmation | None = None  # the re-measurement of a pick and its nearest rivals

    @property
    def rate_is_lower_bound(self) -> bool:
        """Whether the figure is only a rate the config held, nothing above it measured (the predicted
        search measures your config at its predicted rate only where it cannot compete)."""
        return marks_lower_bound(self.metrics)

    @property
    def claimed_throughput(self) -> float | None:
        """The figure this trial stands for: the confirmed one where confirmed, else the search's."""
        if self.confirmation is not None:
            return self.confirmation.throughput_infer_per_s if self.confirmation.held else None
        return self.throughput_infer_per_s


@dataclass(frozen=True)
class TuneRecord:
    """A whole tune run: the budget, every trial, the recommendation. Saved as tune.json."""

    perfkit_version: str
    created_utc: str
    command: tuple[str, ...]
    machine: Machine  # older tune records' free-form machine objects are read by Machine.from_mapping
    server: dict[str, Any]
    model: str
    latency_budget_ms: float
    percentile: float
    objective: ObjectiveName
    original_config: str  # config.pbtxt text, byte for byte
    best_config: str | None  # config.pbtxt text of the recommendation
    best_trial: int | None
    trials: tuple[TrialRecord, ...]
    pareto_trials: tuple[int, ...] = ()
    importances: dict[str, float] = field(default_factory=dict)
    status: Literal["ok", "failed", "interrupted"] = "ok"
    error: str | None = None
    # What latency_budget_ms holds at the percentile: "latency" (end-to-end request latency; what
    # records before this field meant), "ttft" or "itl" (a decoupled model's stream). Trials'
    # latency_us are that metric's percentile.
    budget_metric: str = "latency"
    # A traffic mix tuned jointly: its models (model is the first) and weights, and each model's
    # budget (latency_budget_ms is the first's; trials' latency_us the worst model's percentile
    # scaled to it). Empty for one model.
    mix: tuple[tuple[str, int], ...] = ()
    mix_budgets_ms: dict[str, float] = field(default_factory=dict)
    calibration: Calibration | None = None  # the fitted server model of a predicted search (--search predict)
    # How candidates reached the server: "file" (config.pbtxt rewritten in the repository, what
    # records before this field did) or "api" (loaded as config overrides, no file written); and
    # where original_config (and best_config, rendered as edits of it) came from: "repository"
    # (the model's config.pbtxt) or "served" (the config the server served, in protobuf order).
    route: str = "file"
    original_from: str = "repository"
    schema: str = TUNE_SCHEMA
    schema_version: int = TUNE_SCHEMA_VERSION
    # Which config search ran, "measure" or "predict" (perfkit.tuner's Search), and why: --search
    # auto's reason, or that it was asked for. Empty in records before these fields.
    search: str = ""
    search_reason: str = ""

    def trial(self, number: int | None) -> TrialRecord | None:
        """The trial of that number, if any."""
        return next((t for t in self.trials if t.number == number), None) if number is not None else None

    def best(self) -> TrialRecord | None:
        """The recommendation: the complete, feasible trial ranked highest by the record's objective.

        The ranking is the objective registry's (perfkit.objectives.Objective.best): confirmed
        picks first, ties to the lower latency, then the earlier trial; None when no trial is
        feasible.
        """
        return objectives.get(self.objective).best(self.trials)

    def original(self) -> TrialRecord | None:
        """The trial that measured the user's original config (a complete one first)."""
        originals = [t for t in self.trials if t.is_original]
        return next((t for t in originals if t.state == "complete"), None) or next(iter(originals), None)

    def pareto(self) -> list[TrialRecord]:
        """Feasible complete trials no other dominates on throughput (up) and latency (down), by throughput."""
        return objectives.pareto_front(self.trials)

    def save(self, path: Path) -> Path:
        """Write atomically (temp file then rename); returns path."""
        return _save_json(to_dict(self), Path(path))

    @classmethod
    def load(cls, path: Path) -> TuneRecord:
        """Read a tune.json; raises InputError naming the file and what is wrong."""
        return cls.from_dict(_read_json(Path(path), "tune record"), source=str(path))

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<tune record>") -> TuneRecord:
        """Build from parsed JSON; raises InputError on another schema or version or a malformed record."""
        if not isinstance(data, dict) or data.get("schema") != TUNE_SCHEMA:
            raise InputError(f"{source} is not a perfkit tune record (field 'schema' is not {TUNE_SCHEMA!r})")
        if data.get("schema_version") != TUNE_SCHEMA_VERSION:
            raise InputError(
                f"{source} has schema_version {data.get('schema_version')!r}; this perfkit reads version "
                f"{TUNE_SCHEMA_VERSION}",
                hint="read it with the perfkit version that wrote it",
            )
        trials = data.get("trials")
        if isinstance(trials, list):  # records before the hashes were named for what they hash
            data = {**data, "trials": [_renamed_key(t, "config_sha256", "config_pbtxt_sha256") for t in trials]}
        try:
            return from_dict(cls, data)
        except (TypeError, KeyError, ValueError) as err:
            raise InputError(f"{source} is a malformed tune record: {err}") from None

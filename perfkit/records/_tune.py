"""The tune record: a whole tune run, its trials and their confirmations."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from perfkit import objectives
from perfkit.errors import InputError
from perfkit.objectives import ObjectiveName
from perfkit.records._budget import Budget
from perfkit.records._calibration import Calibration
from perfkit.records._load import LoadLevel
from perfkit.records._machine import Machine
from perfkit.records._serial import _read_json, _renamed_key, _save_json, from_dict, to_dict

TUNE_SCHEMA = "perfkit.tune"
# Version 2 holds the budget as one object ("budget": latency_budget_ms, percentile, metric,
# per_model_ms); version 1 held it flat (latency_budget_ms, percentile, budget_metric,
# mix_budgets_ms) and is still read (_budget_from_flat_keys).
TUNE_SCHEMA_VERSION = 2
READABLE_TUNE_SCHEMA_VERSIONS = (1, 2)


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
    # What every trial was judged by: the value, its percentile, what it holds ("latency": the
    # end-to-end request latency, or a decoupled model's stream "ttft" / "itl"; trials'
    # latency_us are that metric's percentile), and for a traffic mix each model's own budget
    # (trials' latency_us are then the worst model's percentile scaled to the first's).
    budget: Budget
    objective: ObjectiveName
    original_config: str  # config.pbtxt text, byte for byte
    best_config: str | None  # config.pbtxt text of the recommendation
    best_trial: int | None
    trials: tuple[TrialRecord, ...]
    pareto_trials: tuple[int, ...] = ()
    importances: dict[str, float] = field(default_factory=dict)  # each knob's median over resamples (tuner/_importance)
    # the importances' range over the resamples (10% and 90%); empty in records before the spread was kept
    importance_low: dict[str, float] = field(default_factory=dict)
    importance_high: dict[str, float] = field(default_factory=dict)
    # what the importances were computed over: "" / "the trials" (the completed trials), or "the predictions
    # of N configs" (the predicted search's calibrated predictions of the whole space, tuner/_importance)
    importance_over: str = ""
    status: Literal["ok", "failed", "interrupted"] = "ok"
    error: str | None = None
    # A traffic mix tuned jointly: its models (model is the first) and weights (each model's budget
    # is the budget's per_model_ms). Empty for one model.
    mix: tuple[tuple[str, int], ...] = ()
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
        version = data.get("schema_version")
        if version not in READABLE_TUNE_SCHEMA_VERSIONS:
            raise InputError(
                f"{source} has schema_version {version!r}; this perfkit reads versions "
                f"{', '.join(map(str, READABLE_TUNE_SCHEMA_VERSIONS))}",
                hint="read it with the perfkit version that wrote it",
            )
        trials = data.get("trials")
        if isinstance(trials, list):  # records before the hashes were named for what they hash
            data = {**data, "trials": [_renamed_key(t, "config_sha256", "config_pbtxt_sha256") for t in trials]}
        try:
            if version == 1:
                data = _budget_from_flat_keys(data)
            return from_dict(cls, data)
        except (TypeError, KeyError, ValueError) as err:
            raise InputError(f"{source} is a malformed tune record: {err}") from None


def _budget_from_flat_keys(data: dict[str, Any]) -> dict[str, Any]:
    """A version-1 record's flat budget keys as version 2's budget object (records before
    budget_metric held end-to-end latency budgets; before mix_budgets_ms, one model's)."""
    flat = ("latency_budget_ms", "percentile", "budget_metric", "mix_budgets_ms")
    out = {k: v for k, v in data.items() if k not in flat}
    out["budget"] = {
        "latency_budget_ms": data["latency_budget_ms"],
        "percentile": data["percentile"],
        "metric": data.get("budget_metric", "latency"),
        "per_model_ms": list((data.get("mix_budgets_ms") or {}).items()),
    }
    out["schema_version"] = TUNE_SCHEMA_VERSION
    return out

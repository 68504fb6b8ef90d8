"""Progress of a tune run as typed events. The library emits them (and logs through
`logging`); whoever runs it decides what to show: the CLI prints each event's line()."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfkit.records import budget_label


@dataclass(frozen=True)
class TuneEvent:
    """Base of every tune progress event."""

    def line(self) -> str:
        """The event as one line of the CLI's progress output."""
        raise NotImplementedError


OnEvent = Callable[[TuneEvent], None]


@dataclass(frozen=True)
class SearchStarted(TuneEvent):
    model: str
    backend: str
    percentile: float
    latency_budget_ms: float
    dimensions: tuple[str, ...]
    notes: tuple[str, ...]
    budget_metric: str = "latency"
    load: str = ""  # how trials offer load (TrialLoadSettings.load_line)

    def line(self) -> str:
        stat = budget_label(self.budget_metric, self.percentile)
        lines = [f"perfkit tune: {self.model} ({self.backend}), {stat} <= {self.latency_budget_ms:g} ms"]
        lines += [f"  load: {self.load}"] if self.load else []
        lines += [f"  search {d}" for d in self.dimensions]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


@dataclass(frozen=True)
class StudyOpened(TuneEvent):
    name: str
    storage: str
    trials_so_far: int

    def line(self) -> str:
        return f"  study {self.name!r} in {self.storage} ({self.trials_so_far} trials so far)"


@dataclass(frozen=True)
class AccuracyNote(TuneEvent):
    message: str

    def line(self) -> str:
        return f"  accuracy: {self.message}"


@dataclass(frozen=True)
class TrialStarted(TuneEvent):
    number: int
    of: int | None
    label: str

    def line(self) -> str:
        return f"trial {self.number}{f'/{self.of}' if self.of else ''}: {self.label}"


@dataclass(frozen=True)
class TrialRepeated(TuneEvent):
    number: int
    of: int | None
    label: str
    same_as: int

    def line(self) -> str:
        of = f"/{self.of}" if self.of else ""
        return f"trial {self.number}{of}: {self.label}: same config as trial {self.same_as}, not measured again"


@dataclass(frozen=True)
class TrialRejected(TuneEvent):
    """A candidate Triton would reject: recorded, never written nor loaded."""

    number: int
    label: str
    reason: str

    def line(self) -> str:
        return f"trial {self.number}: {self.label}: rejected before loading: {self.reason}"


@dataclass(frozen=True)
class TrialLoaded(TuneEvent):
    """The candidate is served (reloaded, what the server applied checked) and its load search begins."""

    number: int
    reload_s: float

    def line(self) -> str:
        return f"  served (reload {self.reload_s:.1f} s): measuring"


@dataclass(frozen=True)
class TrialFailed(TuneEvent):
    number: int
    reason: str

    def line(self) -> str:
        return f"  failed: {self.reason}"


@dataclass(frozen=True)
class TrialPruned(TuneEvent):
    number: int
    reason: str
    duration_s: float

    def line(self) -> str:
        return f"  pruned: {self.reason} ({self.duration_s:.1f} s)"


@dataclass(frozen=True)
class TrialMeasured(TuneEvent):
    number: int
    throughput_infer_per_s: float
    concurrency: int | None  # the highest load within the budget; None: only the lowest measured
    percentile: float
    latency_ms: float
    feasible: bool
    reload_s: float
    measure_s: float
    levels_measured: int
    budget_metric: str = "latency"
    output_tokens_per_s: float | None = None  # streamed (decoupled) models
    load_label: str | None = None  # an open-loop load ('120 req/s poisson'); None: concurrency
    cut: str = ""  # why the load search ended early (TrialVerdict.search_cut): the figure is then at least this
    # the share of requests the server rejected at that load (a bounded queue, a queue timeout): what
    # the figure gave up for its tail, within --max-error-rate; 0 where it rejected none
    rejection_rate: float = 0.0

    def line(self) -> str:
        load = f"concurrency {self.concurrency}" if self.concurrency is not None else "lowest load"
        if self.load_label is not None:
            load = self.load_label
        status = "within budget" if self.feasible else "INFEASIBLE"
        if self.cut:
            status += f", at least ({self.cut})" if self.feasible else f" ({self.cut})"
        stat = budget_label(self.budget_metric, self.percentile)
        tokens = f" ({self.output_tokens_per_s:.1f} tokens/s)" if self.output_tokens_per_s is not None else ""
        rejected = f", {self.rejection_rate * 100:.1f}% rejected" if self.rejection_rate else ""
        return (
            f"  {self.throughput_infer_per_s:.1f} infer/s{tokens} at {load}, {stat} {self.latency_ms:.2f} ms"
            f"{rejected}: {status} (reload {self.reload_s:.1f} s, measure {self.measure_s:.1f} s,"
            f" {self.levels_measured} levels)"
        )


@dataclass(frozen=True)
class ConfirmStarted(TuneEvent):
    """A candidate re-measured before it is claimed (the pick, or a rival within reach of it)."""

    number: int
    label: str
    load_label: str
    repeats: int
    again: bool = False  # a demoted candidate taken up again below where it failed (_confirm.resume_demoted)

    def line(self) -> str:
        what = "taken up again below where it failed, " if self.again else ""
        return f"confirm trial {self.number} ({self.label}): {what}{self.repeats} longer runs at {self.load_label}"


@dataclass(frozen=True)
class ConfirmDone(TuneEvent):
    number: int
    held: bool
    line_text: str

    def line(self) -> str:
        return f"  {self.line_text}"


@dataclass(frozen=True)
class ConfirmSkipped(TuneEvent):
    """A rival left unconfirmed: at its search's load it could only tie the claim already held."""

    number: int
    label: str
    why: str

    def line(self) -> str:
        return f"confirm trial {self.number} ({self.label}): not run, {self.why}"


@dataclass(frozen=True)
class SearchStopped(TuneEvent):
    reason: str

    def line(self) -> str:
        return f"stopping: {self.reason}"


@dataclass(frozen=True)
class Summary(TuneEvent):
    """The closing lines (counts, best, Pareto front, importances, where results are)."""

    lines: tuple[str, ...]
    output_dir: Path

    def line(self) -> str:
        return "\n".join(self.lines)


@dataclass(frozen=True)
class Applied(TuneEvent):
    trial: int | None
    config_path: Path
    backup: Path | None

    def line(self) -> str:
        if self.backup is None:
            return "--apply: the original is already the best config; nothing written"
        return f"--apply: wrote trial {self.trial} to {self.config_path} (backup {self.backup.name}) and reloaded"


def fmt_params(params: Mapping[str, Any]) -> str:
    """Parameters in the short form of progress lines: 'mbs=16 db=on delay_us=500'."""
    short = {
        "max_batch_size": "mbs",
        "dynamic_batching": "db",
        "max_queue_delay_us": "delay_us",
        "preferred_batch_sizes": "pref",
        "instance_count": "inst",
        "instance_kind": "kind",
        "precision": "prec",
        "sequence_strategy": "seq",
        "max_sequence_idle_us": "idle_us",
        "sequence_max_queue_delay_us": "seq_delay_us",
        "max_candidate_sequences": "candidates",
        "sequence_preferred_batch_sizes": "seq_pref",
    }
    parts = []
    for k, v in params.items():
        shown = ("on" if v else "off") if isinstance(v, bool) else v
        parts.append(f"{short.get(k, k)}={shown}")
    return " ".join(parts)

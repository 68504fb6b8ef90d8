"""The objectives a tune can rank its trials by, defined once.

Each objective says its name, what it means, which way it points, the one figure a trial is
ranked by, and the sampler the search uses by default. The CLI's choices, the tuner's
settings and study, and the records' ranking (TuneRecord.best, TuneRecord.pareto) all read
this registry: adding an objective is one entry here (and, if it needs a new figure, the code
that measures that figure).

A leaf module: it imports nothing from perfkit except errors, so records can rank with it.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypeVar

from perfkit.errors import InputError

Direction = Literal["maximize", "minimize"]
# The names, as a type for records and settings; the registry below must define exactly these.
ObjectiveName = Literal["throughput", "pareto", "per-instance", "per-gpu", "goodput"]


class RankedTrial(Protocol):
    """What ranking needs of a trial (perfkit.records.TrialRecord has it)."""

    @property
    def number(self) -> int: ...
    @property
    def state(self) -> str: ...
    @property
    def feasible(self) -> bool: ...
    @property
    def throughput_infer_per_s(self) -> float | None: ...
    @property
    def latency_us(self) -> float | None: ...
    @property
    def metrics(self) -> Mapping[str, float]: ...
    @property
    def claimed_throughput(self) -> float | None: ...
    @property
    def confirmation(self) -> object | None: ...
    @property
    def is_original(self) -> bool: ...


TrialT = TypeVar("TrialT", bound=RankedTrial)


def _throughput(throughput: float, metrics: Mapping[str, float]) -> float:
    return throughput


def _per_hardware(throughput: float, metrics: Mapping[str, float]) -> float:
    return throughput / float(metrics.get("hardware_units", 1.0) or 1.0)


def _goodput(throughput: float, metrics: Mapping[str, float]) -> float:
    return float(metrics.get("goodput_rps", 0.0))


@dataclass(frozen=True)
class Objective:
    """One objective: what a trial is ranked by, which way, and how the search samples for it.

    value(throughput, metrics): the single figure a trial is ranked by (for a front, its first
    coordinate); directions: what the study optimises, one per value the trial reports;
    per_hardware: the tuner divides throughput by the hardware units the config occupies
    (metrics["hardware_units"]), which it computes from the config; front: the answer is a
    Pareto front of throughput and latency, not one trial; sampler: the sampler "auto" means.
    """

    name: str
    summary: str
    value: Callable[[float, Mapping[str, float]], float]
    directions: tuple[Direction, ...] = ("maximize",)
    per_hardware: bool = False
    front: bool = False
    sampler: Literal["tpe", "nsga2"] = "tpe"

    def study_values(self, throughput: float, latency_us: float, metrics: Mapping[str, float]) -> list[float]:
        """The values a trial reports to the study, one per direction."""
        first = self.value(throughput, metrics)
        return [first, latency_us] if self.front else [first]

    def best(self, trials: Sequence[TrialT]) -> TrialT | None:
        """The recommendation among trials: the complete, feasible one with the highest value.

        Confirmed picks only when any held its confirmation (one whose confirmation failed is
        demoted, an unconfirmed trial ranks below the confirmed ones by the search's own reading).
        Where every confirmation failed, the trials never confirmed (--max-time ended the
        confirmations before them) by their search's reading; where none is left, the user's own
        config when its search held the budget: "keep your config", its figure the search's reading
        that its confirmation did not hold (a demoted config other than the original is never
        recommended: a change needs a figure that held). Ties go to the lower latency, then the
        earlier trial. None when no trial is feasible: an infeasible config is never recommended,
        whatever its throughput.
        """
        ok = [t for t in trials if t.state == "complete" and t.feasible and t.throughput_infer_per_s is not None]
        confirmed = [t for t in ok if t.confirmation is not None]
        if confirmed:
            held = [t for t in confirmed if t.claimed_throughput is not None]
            never = [t for t in ok if t.confirmation is None]
            ok = held or never or [t for t in ok if t.is_original]
        if not ok:
            return None
        return max(
            ok,
            key=lambda t: (self.value(t.claimed_throughput or 0.0, t.metrics), -(t.latency_us or math.inf), -t.number),
        )


OBJECTIVES: dict[str, Objective] = {
    o.name: o
    for o in (
        Objective("throughput", "throughput within the budget", _throughput),
        Objective(
            "pareto",
            "throughput and latency: the front of trials no other beats on both",
            _throughput,
            directions=("maximize", "minimize"),
            front=True,
            sampler="nsga2",
        ),
        Objective(
            "per-instance",
            "throughput over the instances the config occupies",
            _per_hardware,
            per_hardware=True,
        ),
        Objective("per-gpu", "throughput over the GPUs the config occupies", _per_hardware, per_hardware=True),
        Objective(
            "goodput",
            "streamed requests meeting every --goodput SLO per second (decoupled models)",
            _goodput,
        ),
    )
}
NAMES: tuple[str, ...] = tuple(OBJECTIVES)
if typing.get_args(ObjectiveName) != NAMES:  # pragma: no cover - holds the two spellings together
    raise AssertionError(f"ObjectiveName {typing.get_args(ObjectiveName)} differs from the registry {NAMES}")
DEFAULT = "throughput"


def get(name: str) -> Objective:
    """The objective of that name; raises InputError naming the value and the choices."""
    try:
        return OBJECTIVES[name]
    except KeyError:
        raise InputError(f"objective {name!r} is not one of {', '.join(NAMES)}") from None


def pareto_front(trials: Sequence[TrialT]) -> list[TrialT]:
    """Feasible complete trials no other dominates on throughput (up) and latency (down), by throughput.
    A repeat of a config already measured (metrics' duplicate_of: answered from that trial) is left
    out: it ties its original on both figures, so neither dominates, and the front would list one
    config twice."""
    ok = [
        t
        for t in trials
        if t.state == "complete"
        and t.feasible
        and t.throughput_infer_per_s is not None
        and t.latency_us is not None
        and "duplicate_of" not in t.metrics
    ]

    def dominates(a: RankedTrial, b: RankedTrial) -> bool:
        at, bt = a.throughput_infer_per_s or 0.0, b.throughput_infer_per_s or 0.0
        al, bl = a.latency_us or 0.0, b.latency_us or 0.0
        return at >= bt and al <= bl and (at > bt or al < bl)

    front = [t for t in ok if not any(dominates(o, t) for o in ok)]
    return sorted(front, key=lambda t: t.throughput_infer_per_s or 0.0)

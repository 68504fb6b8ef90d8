"""Capacity plans: how many replicas (servers or GPUs) carry a target arrival rate within a
latency budget, from the evidence in a tune or profile record, and the check that a fleet does.

The evidence is one replica's sustainable rate with its ~95% interval: a tune record's
recommendation (its confirmed figure and interval where confirmed), or a profile record's
highest level within the budget (its throughput interval from the level's precision). The plan
sizes the fleet on the interval's low end, with headroom: replicas = ceil(target x (1 + headroom)
/ low). Open-loop evidence (arrival rates, `perfkit tune --load rate`, `perfkit profile
--request-rate-range`) is what a planner needs; closed-loop evidence (concurrency) is used too,
and the plan says it is the weaker kind.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from perfkit.errors import InputError, UsageError
from perfkit.records import (
    Budget,
    LoadLevel,
    ProfileSpec,
    RunRecord,
    TuneRecord,
    budget_label,
    level_budget_us,
    open_loop_shortfall,
)


@dataclass(frozen=True)
class ReplicaEvidence:
    """One replica's sustainable rate within the budget, and where the figure comes from."""

    rate_rps: float
    low_rps: float  # ~95% interval
    high_rps: float
    load: str  # the load it was measured at
    open_loop: bool  # measured under arrivals at a rate (True) or with N clients in lockstep
    source: str  # e.g. "tune.json trial 12 (confirmed in 3 runs)"
    latency_ms: float  # the budget statistic at that load
    budget_ms: float
    percentile: float
    budget_metric: str = "latency"
    model: str = ""


@dataclass(frozen=True)
class CapacityPlan:
    """Replicas for a target rate: sized on the evidence's low end with headroom."""

    target_rps: float
    headroom: float
    evidence: ReplicaEvidence
    replicas: int
    replicas_at_point: int  # what the point estimate alone would say
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def per_replica_rps(self) -> float:
        """The rate each replica carries at the target."""
        return self.target_rps / self.replicas

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready description (what `perfkit plan --json` prints)."""
        e = self.evidence
        return {
            "target_rps": self.target_rps,
            "headroom": self.headroom,
            "latency_budget_ms": e.budget_ms,
            "percentile": e.percentile,
            "budget_metric": e.budget_metric,
            "replicas": self.replicas,
            "replicas_at_point_estimate": self.replicas_at_point,
            "per_replica_rps_at_target": self.per_replica_rps,
            "evidence": {
                "model": e.model,
                "sustainable_rps": e.rate_rps,
                "interval_rps": [e.low_rps, e.high_rps],
                "load": e.load,
                "open_loop": e.open_loop,
                "latency_ms": e.latency_ms,
                "source": e.source,
            },
            "notes": list(self.notes),
        }

    def lines(self) -> list[str]:
        """The plan in a few terminal lines."""
        e = self.evidence
        stat = budget_label(e.budget_metric, e.percentile)
        kind = "open loop" if e.open_loop else "closed loop"
        out = [
            f"plan: {self.target_rps:,.0f} req/s at {stat} <= {e.budget_ms:g} ms with {self.headroom:.0%} headroom",
            f"per replica: {e.rate_rps:,.1f} req/s (95% interval {e.low_rps:,.1f}-{e.high_rps:,.1f}) "
            f"at {e.load} ({kind}), "
            f"{stat} {e.latency_ms:.2f} ms; from {e.source}",
            f"replicas: {self.replicas} ({self.target_rps * (1 + self.headroom):,.0f} req/s with headroom over "
            f"{e.low_rps:,.1f} req/s each, the interval's low end; {self.replicas_at_point} at the point estimate)",
            f"at the target each replica carries {self.per_replica_rps:,.1f} req/s",
        ]
        out += [f"note: {n}" for n in self.notes]
        return out


def _budget(requested_ms: float | None, recorded_ms: float | None, what: str) -> tuple[float, list[str]]:
    if requested_ms is None:
        if recorded_ms is None:
            raise UsageError(f"{what} has no latency budget of its own", hint="give --latency-budget, e.g. 50ms")
        return recorded_ms, []
    if recorded_ms is not None and requested_ms < recorded_ms:
        raise UsageError(
            f"--latency-budget {requested_ms:g} ms is tighter than the {recorded_ms:g} ms {what} was judged by",
            hint="tune or profile again under the tighter budget",
        )
    notes = []
    if recorded_ms is not None and requested_ms > recorded_ms:
        notes.append(f"{what} was judged by a {recorded_ms:g} ms budget: the plan is conservative for {requested_ms:g}")
    return requested_ms, notes


def evidence_from_tune(
    rec: TuneRecord, *, latency_budget_ms: float | None = None, source: str = "tune record"
) -> tuple[ReplicaEvidence, list[str]]:
    """The recommendation of a tune record as one replica's evidence; raises InputError when
    it recommends nothing, UsageError for a tighter budget."""
    budget_ms, notes = _budget(latency_budget_ms, rec.budget.latency_budget_ms, source)
    best = rec.best()
    if best is None or best.throughput_infer_per_s is None or best.load is None:
        raise InputError(f"{source} recommends no config (none met its budget): nothing to plan from")
    c = best.confirmation
    if c is not None and not c.held:
        raise InputError(
            f"{source} recommends keeping the original config, whose figure did not hold its confirmation: "
            "nothing to plan from",
            hint="tune again with more --max-time, or plan from a profile of the config (perfkit plan RUN.json)",
        )
    if c is not None and c.held:
        rate, low, high, load, lat = c.throughput_infer_per_s, c.throughput_low, c.throughput_high, c.load, c.latency_us
        how = f"{source} trial {best.number} (confirmed in {c.repeats} runs)"
    else:
        rate = low = high = best.throughput_infer_per_s
        load, lat = best.load, best.latency_us or 0.0
        how = f"{source} trial {best.number} (one reading, not confirmed: no interval)"
        notes.append("the evidence is a single unconfirmed reading: tune with --confirm 3 for an interval")
    evidence = ReplicaEvidence(
        rate, low, high, load.label, load.mode != "concurrency", how, lat / 1e3, budget_ms, rec.budget.percentile,
        rec.budget.metric, rec.model,
    )  # fmt: skip
    if not evidence.open_loop:
        notes.append("closed-loop evidence (clients in lockstep): `perfkit tune --load rate` measures arrival rates")
    return evidence, notes


def evidence_from_run(
    rec: RunRecord, *, latency_budget_ms: float | None, percentile: float = 99.0, source: str = "run record"
) -> tuple[ReplicaEvidence, list[str]]:
    """A profile record's highest level within the budget as one replica's evidence (open-loop
    levels: sustainable ones only); raises UsageError without a budget, InputError when no level
    is within it."""
    budget_ms, notes = _budget(latency_budget_ms, None, source)
    budget = Budget(budget_ms, percentile)
    ok = [lv for lv in rec.levels if budget.within(lv)]
    if not ok:
        raise InputError(
            f"{source}: no level is within p{percentile:g} <= {budget_ms:g} ms",
            hint="profile lower loads, or plan for a larger budget",
        )
    best = max(ok, key=lambda lv: lv.completed_rps)
    rel = best.precision.throughput_rel or 0.0
    rate = best.completed_rps
    load: LoadLevel = best.load
    evidence = ReplicaEvidence(
        rate, rate * (1 - rel), rate * (1 + rel), load.label, load.mode != "concurrency",
        f"{source} ({load.label})", level_budget_us(best, percentile) / 1e3, budget_ms, percentile, "latency",
        rec.spec.model,
    )  # fmt: skip
    if not evidence.open_loop:
        notes.append("closed-loop evidence (clients in lockstep): profile with --request-rate-range for arrival rates")
    return evidence, notes


def replicas_for(need_rps: float, per_replica_rps: float) -> int:
    """The fewest replicas (at least one) that carry need_rps at per_replica_rps each."""
    return max(1, math.ceil(need_rps / per_replica_rps - 1e-9))


def plan_capacity(
    evidence: ReplicaEvidence, *, target_rps: float, headroom: float, notes: list[str] | None = None
) -> CapacityPlan:
    """Replicas for target_rps: ceil(target x (1 + headroom) / the evidence's low end)."""
    need = target_rps * (1 + headroom)
    low = evidence.low_rps if evidence.low_rps > 0 else evidence.rate_rps
    replicas = replicas_for(need, low)
    point = replicas_for(need, evidence.rate_rps)
    return CapacityPlan(target_rps, headroom, evidence, replicas, point, tuple(notes or ()))


def verification_spec(plan: CapacityPlan, servers: int, *, duration_s: float, protocol: str = "http") -> ProfileSpec:
    """The open-loop level a fleet of `servers` runs to check the plan: the target rate when the
    fleet is the plan's size or larger, else the fleet's share of it (Poisson arrivals)."""
    rate = plan.target_rps * min(1.0, servers / plan.replicas)
    windows = 4
    return ProfileSpec(
        model=plan.evidence.model,
        levels=(LoadLevel("request_rate", rate, "poisson"),),
        protocol=protocol,  # type: ignore[arg-type]  # checked by the CLI's choice
        measurement_interval_ms=duration_s * 1000 / windows,
        min_windows=windows,
        max_trials=windows,
        percentile=plan.evidence.percentile,
        warmup_s=1.0,
    )


def judge_verification(plan: CapacityPlan, record: RunRecord, servers: int) -> tuple[bool, str]:
    """Whether a fleet's run held the plan (its level sustainable and within the budget); one line."""
    e = plan.evidence
    if not record.levels:
        return False, f"NOT verified: the fleet's run measured nothing ({record.error or record.status})"
    lv = record.levels[-1]
    budget = Budget(e.budget_ms, e.percentile)
    lat_ms = budget.level_us(lv) / 1e3
    short = open_loop_shortfall(lv)
    ok = budget.within(lv)
    stat = budget_label(e.budget_metric, e.percentile)
    share = "" if servers >= plan.replicas else f" (the fleet's share: {servers} of {plan.replicas} replicas)"
    why = "" if ok else "; " + (short or (f"{lv.error_count} errors" if lv.error_count else "over the budget"))
    head = "verified" if ok else "NOT verified"
    return ok, (
        f"{head}: {servers} server(s) at {lv.load.value:,.0f} req/s{share}: completed {lv.completed_rps:,.1f} req/s, "
        f"{stat} {lat_ms:.2f} ms (budget {e.budget_ms:g} ms), dropped {lv.dropped_count}{why}"
    )

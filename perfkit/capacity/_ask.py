"""What `perfkit plan` does, as functions returning data: read the record, plan from its measured
evidence (and from a predicted rate when asked), check the plan on servers, the plan's JSON."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfkit.capacity._plan import (
    CapacityPlan,
    evidence_from_run,
    evidence_from_tune,
    judge_verification,
    plan_capacity,
    verification_spec,
)
from perfkit.capacity._predicted import KnobChoice, PredictedPlan, plan_predicted, predict_evidence
from perfkit.errors import InputError, MeasurementError, UsageError
from perfkit.records import RunRecord, TuneRecord, load_record
from perfkit.units import parse_duration_s


@dataclass(frozen=True)
class PlanAsk:
    """What a plan is asked for: a target rate with headroom, the budget (else the record's), and the
    config to predict (knobs named, or `predicted` for the best of the default space)."""

    target_rps: float
    headroom: float
    latency_budget_ms: float | None = None
    percentile: float = 99.0  # with a profile record
    choice: KnobChoice = field(default_factory=KnobChoice)
    predicted: bool = False

    @property
    def wants_predicted(self) -> bool:
        """Whether a predicted plan is asked for (--predict, or any knob named)."""
        return self.predicted or self.choice.named


@dataclass(frozen=True)
class MeasuredPlan:
    """The plan from the record's measured evidence, or why there is none (only where a prediction was asked)."""

    plan: CapacityPlan | None
    error: str = ""

    def lines(self) -> list[str]:
        """What `perfkit plan` prints for it."""
        return self.plan.lines() if self.plan is not None else [f"measured: no plan ({self.error})"]


@dataclass(frozen=True)
class Verification:
    """How servers ran at the plan's rate: whether the plan held, in one line."""

    servers: int
    held: bool
    line: str

    def to_json(self) -> dict[str, Any]:
        """The plan JSON's "verification" object."""
        return {"servers": self.servers, "held": self.held, "line": self.line}


def read_plan_record(path: Path) -> RunRecord | TuneRecord:
    """The tune or profile record at path (a tune's output directory: its tune.json); raises InputError."""
    return load_record(path / "tune.json" if path.is_dir() else path)


def measured_plan(rec: RunRecord | TuneRecord, ask: PlanAsk, *, source: str) -> MeasuredPlan:
    """Plan from the record's measured evidence; raises InputError/UsageError when it has none within the
    budget, unless a prediction is asked for (then the plan is None and the error says why)."""
    if ask.wants_predicted and not isinstance(rec, TuneRecord):
        raise UsageError(f"{source}: --predict needs a tune record with a calibration, not a profile run record",
                         hint="tune with --search predict, then plan from its tune.json")  # fmt: skip
    try:
        if isinstance(rec, TuneRecord):
            evidence, notes = evidence_from_tune(rec, latency_budget_ms=ask.latency_budget_ms, source=source)
        else:
            evidence, notes = evidence_from_run(rec, latency_budget_ms=ask.latency_budget_ms,
                                                percentile=ask.percentile, source=source)  # fmt: skip
        return MeasuredPlan(plan_capacity(evidence, target_rps=ask.target_rps, headroom=ask.headroom, notes=notes))
    except (InputError, UsageError) as err:
        if not ask.wants_predicted:
            raise
        # A config never measured is what a prediction is for: the measured plan's absence is stated.
        return MeasuredPlan(None, err.message)


def predicted_plan(rec: TuneRecord, ask: PlanAsk) -> PredictedPlan:
    """Plan from the rate predicted for the asked config with the tune's calibration; raises InputError/UsageError."""
    if ask.latency_budget_ms is None and rec.budget.metric != "latency":
        # a streamed model's calibration models its whole stream: the prediction holds end-to-end latency
        raise UsageError(
            f"--predict: the tune's budget is on {rec.budget.label}, and a plan predicts the end-to-end latency",
            hint="give --latency-budget, the end-to-end latency a request may take, e.g. 500ms",
        )
    budget = ask.latency_budget_ms if ask.latency_budget_ms is not None else rec.budget.latency_budget_ms
    evidence = predict_evidence(rec, ask.choice, budget_ms=budget)
    return plan_predicted(evidence, target_rps=ask.target_rps, headroom=ask.headroom)


def plan_json(ask: PlanAsk, measured: MeasuredPlan, predicted: PredictedPlan | None,
              verification: Verification | None) -> dict[str, Any]:  # fmt: skip
    """The plan as JSON (what --json prints and -o writes)."""
    result: dict[str, Any]
    if measured.plan is not None:
        result = measured.plan.to_json()
    else:
        result = {"target_rps": ask.target_rps, "headroom": ask.headroom, "replicas": None,
                  "measured_error": measured.error}  # fmt: skip
    if predicted is not None:
        result["predicted"] = predicted.to_json()
    if verification is not None:
        result["verification"] = verification.to_json()
    return result


def check_plan(
    measured: MeasuredPlan,
    urls: list[str],
    *,
    ray_address: str | None,
    duration: str,
    protocol: str,
    command: tuple[str, ...] = (),
    on_start: Callable[[int, float], None] | None = None,
) -> Verification:
    """Run the servers at urls (several through a Ray cluster) at their share of the plan's target rate, for
    `duration` (as typed: "8s"), and judge whether the plan held; on_start gets the servers and the rate each
    is sent, before the run.

    Raises UsageError (no measured plan, a bad duration, a fleet without Ray), and the measure stage's errors
    other than a MeasurementError with a record (a failed run is judged from what it measured).
    """
    from perfkit.server.remote import attach_remote

    plan = measured.plan
    if plan is None:
        raise UsageError("-u checks the measured plan, and there is none", hint="see the 'measured:' line above")
    duration_s = parse_duration_s(duration, what="--duration")
    if len(urls) > 1 and not ray_address:
        raise UsageError("several -u servers (a fleet) need --ray ADDRESS|auto to drive them")
    spec = verification_spec(plan, len(urls), duration_s=duration_s, protocol=protocol)
    if on_start:
        on_start(len(urls), spec.levels[0].value)
    servers = [attach_remote(u) for u in urls]
    try:
        if ray_address:
            from perfkit.distributed import profile_distributed

            rec = profile_distributed(servers, spec, address=ray_address, client_hosts=1, command=command)
        else:
            from perfkit.measure import profile

            rec = profile(servers[0], spec, command=command)
    except MeasurementError as err:
        if not isinstance(err.record, RunRecord):
            raise
        rec = err.record
    held, line = judge_verification(plan, rec, len(urls))
    return Verification(len(urls), held, line)

"""Capacity planning: how many replicas carry a target arrival rate within a latency budget,
from the evidence in a tune or profile record, and the check that a fleet does; for configs never
measured, from a rate the batcher simulator predicts with a predicted tune's calibration. Analysis
over records (what `perfkit plan` prints and the plan page of a report shows); it loads no optimizer.
"""

from perfkit.capacity._ask import (
    MeasuredPlan,
    PlanAsk,
    Verification,
    check_plan,
    measured_plan,
    plan_json,
    predicted_plan,
    read_plan_record,
)
from perfkit.capacity._plan import (
    CapacityPlan,
    ReplicaEvidence,
    evidence_from_run,
    evidence_from_tune,
    judge_verification,
    plan_capacity,
    verification_spec,
)
from perfkit.capacity._predicted import (
    KnobChoice,
    PredictedEvidence,
    PredictedPlan,
    knob_choice,
    plan_predicted,
    predict_evidence,
    predicted_space,
)
from perfkit.units import parse_percent, parse_rate_rps

__all__ = [
    "CapacityPlan",
    "KnobChoice",
    "MeasuredPlan",
    "PlanAsk",
    "PredictedEvidence",
    "PredictedPlan",
    "ReplicaEvidence",
    "Verification",
    "check_plan",
    "evidence_from_run",
    "evidence_from_tune",
    "judge_verification",
    "knob_choice",
    "measured_plan",
    "parse_percent",
    "parse_rate_rps",
    "plan_capacity",
    "plan_json",
    "plan_predicted",
    "predict_evidence",
    "predicted_plan",
    "predicted_space",
    "read_plan_record",
    "verification_spec",
]

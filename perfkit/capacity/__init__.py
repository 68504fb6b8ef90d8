"""Capacity planning: how many replicas carry a target arrival rate within a latency budget,
from the evidence in a tune or profile record, and the check that a fleet does. Analysis over
records (what `perfkit plan` prints and the plan page of a report shows); it loads no optimizer.
"""

from perfkit.capacity._plan import (
    CapacityPlan,
    ReplicaEvidence,
    evidence_from_run,
    evidence_from_tune,
    judge_verification,
    plan_capacity,
    verification_spec,
)
from perfkit.units import parse_percent, parse_rate_rps

__all__ = [
    "CapacityPlan",
    "ReplicaEvidence",
    "evidence_from_run",
    "evidence_from_tune",
    "judge_verification",
    "parse_percent",
    "parse_rate_rps",
    "plan_capacity",
    "verification_spec",
]

"""The comparison's typed results and options: what the gate prints and the report renders."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from perfkit.errors import ExitCode, PerfkitError
from perfkit.gate.thresholds import DEFAULT_JOB_NOISE_PCT, DEFAULT_THRESHOLDS, Threshold, parse_thresholds
from perfkit.records import DEFAULT_MIN_WINDOWS, LatencyKind

FindingVerdict = Literal["pass", "regression", "improvement", "inconclusive", "invalid"]
BaselineKind = Literal["stored", "ab"]  # a baseline from another run, or measured A/B in the same job
VERDICT_ORDER: tuple[FindingVerdict, ...] = ("regression", "invalid", "inconclusive", "improvement", "pass")
EXIT_OF: dict[str, ExitCode] = {
    "regression": ExitCode.GATE_REGRESSION,
    "invalid": ExitCode.GATE_INVALID,
    "inconclusive": ExitCode.GATE_INCONCLUSIVE,
    "improvement": ExitCode.OK,
    "pass": ExitCode.OK,
}


class GateRefused(PerfkitError):
    """The two runs are not comparable (load or machine differ) and the user did not allow it."""

    exit_code = ExitCode.GATE_INVALID


class GateFailed(PerfkitError):
    """The gate's verdict was not a pass: carries that verdict's exit code (10, 11 or 12)."""

    def __init__(self, verdict: str, exit_code: ExitCode, detail: str = "") -> None:
        super().__init__(f"gate verdict: {verdict}" + (f" ({detail})" if detail else ""))
        self.verdict = verdict
        self.exit_code = exit_code


@dataclass(frozen=True)
class GateOptions:
    """How strict the gate is. Defaults: throughput:-5%, p99:+10%, 95% confidence, DEFAULT_JOB_NOISE_PCT."""

    thresholds: tuple[Threshold, ...] = tuple(parse_thresholds(list(DEFAULT_THRESHOLDS)))
    confidence: float = 0.95
    allow_different_load: bool = False
    allow_different_machine: bool = False
    max_error_fraction: float = 0.01
    max_dropped_fraction: float = 0.01
    max_late_fraction: float = 0.10
    min_windows: int = DEFAULT_MIN_WINDOWS
    # a stored baseline's allowance for two jobs' own speeds, percent per job (A/B: none)
    job_noise_pct: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_JOB_NOISE_PCT))
    seed: int = 0
    n_boot: int = 4000


@dataclass(frozen=True)
class Finding:
    """The verdict on one metric at one load level, with its evidence."""

    level: str
    metric: str  # throughput, p50, p90, p95, p99, p999
    unit: str  # "infer/s" or "us"
    latency_kind: LatencyKind | None  # which latency a percentile is of (None for throughput)
    baseline: float | None
    current: float | None
    delta: float | None  # current - baseline, in unit
    delta_pct: float | None  # effect size: relative change in percent
    ci_pct: tuple[float, float] | None  # two-sided interval of delta_pct at the gate's confidence
    confidence: float | None  # probability that the change has the sign observed
    cohens_d: float | None  # change in units of the per-window spread
    threshold: str
    verdict: FindingVerdict
    reason: str
    windows: tuple[int, int]  # per-window samples used (baseline, current)
    more_windows: int | None = None  # inconclusive: about how many more windows a run would settle it
    past_threshold: bool = False  # the change itself is past the threshold (a pass then says why it passed)

    @property
    def explained(self) -> bool:
        """Whether output lists this finding's reason: every non-pass, and a pass past its threshold."""
        return self.verdict != "pass" or self.past_threshold

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (also the shape perfkit.report's findings take)."""
        return {
            "level": self.level,
            "metric": self.metric,
            "unit": self.unit,
            "latency_kind": self.latency_kind,
            "baseline": self.baseline,
            "current": self.current,
            "delta": self.delta,
            "delta_pct": self.delta_pct,
            "ci_pct": list(self.ci_pct) if self.ci_pct else None,
            "confidence": self.confidence,
            "cohens_d": self.cohens_d if self.cohens_d is None or math.isfinite(self.cohens_d) else None,
            "threshold": self.threshold,
            "verdict": self.verdict,
            "reason": self.reason,
            "windows": list(self.windows),
            "more_windows": self.more_windows,
            "past_threshold": self.past_threshold,
        }


@dataclass(frozen=True)
class GateResult:
    """Every finding of one comparison, the notes on what differs, and the overall verdict."""

    model: str
    comparison: BaselineKind
    baseline_label: str
    current_label: str
    findings: tuple[Finding, ...]
    notes: tuple[str, ...] = ()
    changes: tuple[str, ...] = field(default_factory=tuple)  # config / server version differences

    @property
    def verdict(self) -> FindingVerdict:
        if not self.findings:
            return "invalid"
        present = {f.verdict for f in self.findings}
        return next(v for v in VERDICT_ORDER if v in present)

    @property
    def exit_code(self) -> ExitCode:
        return EXIT_OF[self.verdict]

    @property
    def strength(self) -> str:
        if self.comparison == "ab":
            return "A/B interleaved on one server (strong: machine noise hits both alike)"
        return "stored baseline from another run (weaker: noise between jobs is not in the windows)"

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "verdict": self.verdict,
            "exit_code": int(self.exit_code),
            "comparison": self.comparison,
            "strength": self.strength,
            "baseline": self.baseline_label,
            "current": self.current_label,
            "changes": list(self.changes),
            "notes": list(self.notes),
            "findings": [f.to_dict() for f in self.findings],
        }

"""Capacity plans for configs never measured: one replica's sustainable rate predicted by the
batcher simulator (perfkit.predict) from the calibration a predicted tune stored in its record
(`perfkit tune --search predict`), with the calibration's error around it.

The config is one the user names with the tuner's knob flags (max_batch_size, dynamic batching,
queue delay, preferred sizes, instance count), or the best predicted one of a space built the
same way; knobs not named take the tuner's default values (the space) or the original config's
(one named config). The rate's band is the calibration fit's worst relative error: a service
time off by e moves a saturated rate by about e. Where the tune measured predicted configs, how
far those measurements were from their predictions is stated beside it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from perfkit import predict
from perfkit.capacity._plan import replicas_for
from perfkit.errors import ConfigError, InputError, UsageError
from perfkit.records import Budget, Calibration, TuneRecord, budget_label
from perfkit.server.modelconfig import parse_config

PREFERRED_CHOICES = ("none", "max", "pow2")
SIM_REQUESTS = 6_000  # the predicted search's own (perfkit.tuner's --search predict)
DELAY_POINTS = 8  # log-spaced queue delays in a range, as the predicted search scores them


@dataclass(frozen=True)
class KnobChoice:
    """The configs to predict, as the tuner's knob flags name them; None: not named."""

    max_batch_sizes: tuple[int, ...] | None = None
    dynamic_batching: bool | None = None
    queue_delays_us: tuple[float, ...] | None = None
    preferred: tuple[str, ...] | None = None
    instance_counts: tuple[int, ...] | None = None

    @property
    def named(self) -> bool:
        """Whether any knob was named."""
        return any(
            v is not None
            for v in (
                self.max_batch_sizes,
                self.dynamic_batching,
                self.queue_delays_us,
                self.preferred,
                self.instance_counts,
            )
        )


@dataclass(frozen=True)
class PredictedEvidence:
    """One replica's predicted sustainable rate, its band over the calibration error, and the
    config it is for."""

    config: dict[str, Any]  # max_batch_size, dynamic_batching, preferred_batch_sizes, max_queue_delay_us, instances
    rate_rps: float
    low_rps: float
    high_rps: float
    error_rel: float  # the band: the calibration fit's worst relative error
    fit_rms_rel: float
    latency_ms: float  # the predicted percentile at that rate
    budget_ms: float
    percentile: float
    configs_scored: int
    model: str
    arrival: str = "poisson"
    # How far the tune's measurements of predicted configs were from their predictions: median
    # and worst relative error over `checked` configs (0 checked: the tune measured none).
    checked: int = 0
    measured_median_rel: float | None = None
    measured_worst_rel: float | None = None
    calibrated_max_batch: int = 0  # the largest batch size the calibration measured

    @property
    def extrapolated(self) -> bool:
        """Whether the config batches past what the calibration measured (the fit's line, unmeasured)."""
        c = self.config
        batches = c["max_batch_size"] if c["dynamic_batching"] else 1
        return batches > self.calibrated_max_batch

    @property
    def label(self) -> str:
        """The config in one phrase."""
        c = self.config
        if not c["dynamic_batching"] or c["max_batch_size"] <= 1:
            batching = f"max_batch_size {c['max_batch_size']}, no dynamic batching"
        else:
            pref = ",".join(str(s) for s in c["preferred_batch_sizes"]) or "none"
            batching = (
                f"max_batch_size {c['max_batch_size']}, dynamic batching (queue delay"
                f" {c['max_queue_delay_us']:g} us, preferred {pref})"
            )
        return f"{batching}, {c['instance_count']} instance(s)"


@dataclass(frozen=True)
class PredictedPlan:
    """Replicas for a target rate from a predicted rate: at the prediction, and over its band."""

    target_rps: float
    headroom: float
    evidence: PredictedEvidence
    replicas: int  # at the predicted rate
    replicas_low: int  # if the rate is the band's high end
    replicas_high: int  # if it is the band's low end
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready description (the "predicted" part of `perfkit plan --json`)."""
        e = self.evidence
        return {
            "predicted": True,
            "replicas": self.replicas,
            "replicas_range": [self.replicas_low, self.replicas_high],
            "config": e.config,
            "sustainable_rps": e.rate_rps,
            "band_rps": [e.low_rps, e.high_rps],
            "calibration_error_rel": e.error_rel,
            "calibration_fit_rms_rel": e.fit_rms_rel,
            "latency_ms": e.latency_ms,
            "latency_budget_ms": e.budget_ms,
            "percentile": e.percentile,
            "arrival": e.arrival,
            "configs_scored": e.configs_scored,
            "measured_checks": e.checked,
            "measured_median_error_rel": e.measured_median_rel,
            "measured_worst_error_rel": e.measured_worst_rel,
            "extrapolated": e.extrapolated,
            "notes": list(self.notes),
        }

    def lines(self) -> list[str]:
        """The predicted plan in a few terminal lines."""
        e = self.evidence
        stat = f"p{e.percentile:g}"
        which = f"best of {e.configs_scored} configs predicted" if e.configs_scored > 1 else "the config named"
        out = [
            f"predicted ({which}): {e.label}",
            f"per replica: {e.rate_rps:,.1f} req/s predicted ({e.arrival} arrivals, {stat} {e.latency_ms:.2f} ms"
            f" <= {e.budget_ms:g} ms), {e.low_rps:,.1f}-{e.high_rps:,.1f} over the calibration error"
            f" (+-{e.error_rel:.1%}: its fit's worst; {e.fit_rms_rel:.1%} rms)",
            f"replicas: {self.replicas} (predicted +- calibration error: {self.replicas_low}-{self.replicas_high};"
            f" {self.target_rps * (1 + self.headroom):,.0f} req/s with headroom)",
        ]
        if e.checked and e.measured_median_rel is not None and e.measured_worst_rel is not None:
            out.append(
                f"predictions this tune measured: off by {e.measured_median_rel:.0%} median, {e.measured_worst_rel:.0%}"
                f" worst ({e.checked} configs)"
            )
        if e.extrapolated:
            out.append(
                f"note: max_batch_size {e.config['max_batch_size']} is past the largest batch size calibrated"
                f" ({e.calibrated_max_batch}): its service time is the fit's line, extrapolated"
            )
        out += [f"note: {n}" for n in self.notes]
        return out


def _original_knobs(rec: TuneRecord) -> dict[str, Any]:
    """The original config's batching and instance knobs (what a knob not named stays at)."""
    try:
        cfg = parse_config(rec.original_config, source="the tune record's original config")
    except ConfigError:
        cfg = None
    if cfg is None:
        return {"max_batch_size": 0, "dynamic_batching": False, "preferred": (), "delay": 0.0, "instances": 1}
    db = cfg.HasField("dynamic_batching")
    count = sum(int(g.count) or 1 for g in cfg.instance_group) or 1
    return {
        "max_batch_size": int(cfg.max_batch_size),
        "dynamic_batching": db,
        "preferred": tuple(int(s) for s in cfg.dynamic_batching.preferred_batch_size) if db else (),
        "delay": float(cfg.dynamic_batching.max_queue_delay_microseconds) if db else 0.0,
        "instances": count,
    }


def _pow2(upto: int) -> list[int]:
    return [2**i for i in range(0, 16) if 2**i <= upto]


def _preferred(label: str, mbs: int) -> tuple[int, ...]:
    if label == "none":
        return ()
    if label == "max":
        return (mbs,)
    if label == "pow2":
        return tuple(s for s in _pow2(mbs) if s >= 2)
    raise UsageError(f"--preferred-batch-sizes {label!r} unknown", hint=f"choose from {', '.join(PREFERRED_CHOICES)}")


def predicted_space(rec: TuneRecord, choice: KnobChoice, budget_ms: float) -> list[predict.BatcherConfig]:
    """The configs a choice names. With no knob named: the tuner's default space over the
    calibrated batch sizes (max_batch_size at powers of two up to the largest calibrated, with and
    without dynamic batching, queue delay 0 and 8 log-spaced values from 50 us to half the budget,
    preferred sizes none or pow2, instances 1 to 4 or the most measured). With some named: those
    values, the others at the original config's. Raises UsageError for a value out of range."""
    cal = _calibration(rec)
    orig = _original_knobs(rec)
    top = max([p.batch_size for p in cal.points] + [1])  # past the calibrated sizes the fit extrapolates
    if choice.named:
        sizes = list(choice.max_batch_sizes or (orig["max_batch_size"],))
        dbs = [choice.dynamic_batching if choice.dynamic_batching is not None else orig["dynamic_batching"]]
        delays = list(choice.queue_delays_us or (orig["delay"],))
        prefs: list[str | tuple[int, ...]] = list(choice.preferred or (orig["preferred"],))
        counts = list(choice.instance_counts or (orig["instances"],))
    else:
        sizes = _pow2(top)
        dbs = [False, True]
        high = max(200.0, min(Budget(budget_ms).latency_budget_us / 2, 50_000.0))
        delays = [0.0] + [50.0 * (high / 50.0) ** (i / (DELAY_POINTS - 1)) for i in range(DELAY_POINTS)]
        prefs = ["none", "pow2"]
        counts = list(range(1, max(4, *cal.instance_counts, orig["instances"]) + 1))
    if any(b < 0 for b in sizes) or any(c < 1 for c in counts) or any(d < 0 for d in delays):
        raise UsageError(
            f"predicted config: max_batch_size {sizes}, instances {counts}, queue delays {delays} us out of range",
            hint="max_batch_size >= 0, instances >= 1, queue delay >= 0",
        )
    out: list[predict.BatcherConfig] = []
    for b in sizes:
        for db in dbs:
            for p in prefs if db and b > 1 else [()]:
                pref = _preferred(p, b) if isinstance(p, str) else tuple(s for s in p if s <= b)
                for d in delays if db and b > 1 else [0.0]:
                    out.extend(predict.BatcherConfig(b, db and b > 1, pref, d, c) for c in counts)
    return list(dict.fromkeys(out))


def _calibration(rec: TuneRecord) -> Calibration:
    if rec.calibration is None:
        raise InputError(
            f"tune record of {rec.model} carries no calibration: nothing to predict from",
            hint="tune with --search predict (it stores the calibration in tune.json)",
        )
    return rec.calibration


def _measured_errors(rec: TuneRecord) -> list[float]:
    """|measured / predicted - 1| of every trial the tune measured after predicting it."""
    out = []
    for t in rec.trials:
        want = t.metrics.get("predicted_rps")
        got = t.throughput_infer_per_s
        if want and want > 0 and t.feasible and got:
            out.append(abs(got / want - 1))
    return out


def predict_evidence(
    rec: TuneRecord, choice: KnobChoice, *, budget_ms: float, percentile: float | None = None
) -> PredictedEvidence:
    """The predicted sustainable rate of the config a choice names, or of the best config of the
    space it names, from the record's calibration. Raises InputError without a calibration,
    UsageError for a value out of range."""
    cal = _calibration(rec)
    budget = Budget(budget_ms, rec.budget.percentile if percentile is None else percentile)
    cfgs = predicted_space(rec, choice, budget_ms)
    results = predict.score_space(
        cfgs,
        predict.service_model(cal),
        budget.latency_budget_us,
        percentile=budget.percentile,
        contention=predict.contention(cal),
        requests=SIM_REQUESTS,
        keep=1 if len(cfgs) > 1 else None,
    )
    best = results[0]
    err = cal.stated_error_rel
    measured = sorted(_measured_errors(rec))
    c = best.config
    config = {
        "max_batch_size": c.max_batch_size,
        "dynamic_batching": c.dynamic_batching,
        "preferred_batch_sizes": list(c.preferred_batch_sizes),
        "max_queue_delay_us": c.max_queue_delay_us,
        "instance_count": c.instances,
    }
    lat = best.latency_us if not math.isnan(best.latency_us) else 0.0
    return PredictedEvidence(
        config=config,
        rate_rps=best.rate_rps,
        low_rps=best.rate_rps * (1 - err) if err < 1 else 0.0,
        high_rps=best.rate_rps * (1 + err),
        error_rel=err,
        fit_rms_rel=cal.fit_rms_rel,
        latency_ms=lat / 1e3,
        budget_ms=budget_ms,
        percentile=budget.percentile,
        configs_scored=len(cfgs),
        model=rec.model,
        checked=len(measured),
        measured_median_rel=_median(measured),
        measured_worst_rel=measured[-1] if measured else None,
        calibrated_max_batch=max((p.batch_size for p in cal.points), default=0),
    )


def _median(xs: Sequence[float]) -> float | None:
    if not xs:
        return None
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def plan_predicted(
    evidence: PredictedEvidence, *, target_rps: float, headroom: float, notes: Sequence[str] = ()
) -> PredictedPlan:
    """Replicas for target_rps from a predicted rate: ceil(target x (1 + headroom) / rate), and
    the same over the rate's band. Raises InputError when the prediction holds no rate."""
    if evidence.rate_rps <= 0:
        raise InputError(
            f"predicted: {evidence.label} holds no rate within {budget_label('latency', evidence.percentile)}"
            f" <= {evidence.budget_ms:g} ms",
            hint="plan for a larger budget, or name another config",
        )
    need = target_rps * (1 + headroom)
    at = replicas_for(need, evidence.rate_rps)
    low = replicas_for(need, evidence.high_rps)
    high = max(at, replicas_for(need, evidence.low_rps)) if evidence.low_rps > 0 else at
    return PredictedPlan(target_rps, headroom, evidence, at, low, high, tuple(notes))


def _ints(text: str | None, flag: str) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise UsageError(f"{flag} {text!r}: not a list of integers", hint=f"e.g. {flag} 1,2,4") from None


def _delays(text: str | None) -> tuple[float, ...] | None:
    if text is None:
        return None
    try:
        if ":" in text:
            low, high = (float(v) for v in text.split(":", 1))
            if not 0 < low <= high:
                raise ValueError
            if low == high:
                return (low,)
            return tuple(low * (high / low) ** (i / (DELAY_POINTS - 1)) for i in range(DELAY_POINTS))
        return tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise UsageError(
            f"--queue-delays-us {text!r}: not a list of delays or a range LOW:HIGH with 0 < LOW <= HIGH",
            hint="e.g. --queue-delays-us 0,500 or 100:10000",
        ) from None


def knob_choice(
    *,
    max_batch_sizes: str | None = None,
    dynamic_batching: bool | None = None,
    queue_delays_us: str | None = None,
    preferred_batch_sizes: str | None = None,
    instance_counts: str | None = None,
) -> KnobChoice:
    """A KnobChoice from the tuner's knob flags as typed (lists "1,2,4"; delays also LOW:HIGH,
    8 log-spaced values; preferred sizes among none,max,pow2). Raises UsageError."""
    prefs = None
    if preferred_batch_sizes is not None:
        prefs = tuple(p.strip() for p in preferred_batch_sizes.split(",") if p.strip())
        for p in prefs:
            if p not in PREFERRED_CHOICES:
                raise UsageError(
                    f"--preferred-batch-sizes {p!r} unknown", hint=f"choose from {', '.join(PREFERRED_CHOICES)}"
                )
    return KnobChoice(
        _ints(max_batch_sizes, "--max-batch-sizes"),
        dynamic_batching,
        _delays(queue_delays_us),
        prefs,
        _ints(instance_counts, "--instance-counts"),
    )

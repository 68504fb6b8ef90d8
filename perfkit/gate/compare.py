"""Compare two run records level by level and metric by metric; pure over records, no server."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from perfkit.errors import ExitCode, InputError, PerfkitError
from perfkit.gate.stats import DiffStats, bootstrap_rel_diff, min_samples
from perfkit.gate.stream_metrics import STREAM_METRICS, stream_summary, stream_values
from perfkit.gate.thresholds import DEFAULT_THRESHOLDS, PERCENTILE_OF, Threshold, parse_thresholds
from perfkit.records import LatencyKind, LevelResult, RunRecord

Verdict = Literal["pass", "regression", "improvement", "inconclusive", "invalid"]
Comparison = Literal["stored", "ab"]
VERDICT_ORDER: tuple[Verdict, ...] = ("regression", "invalid", "inconclusive", "improvement", "pass")
EXIT_OF: dict[str, ExitCode] = {
    "regression": ExitCode.GATE_REGRESSION,
    "invalid": ExitCode.GATE_INVALID,
    "inconclusive": ExitCode.GATE_INCONCLUSIVE,
    "improvement": ExitCode.OK,
    "pass": ExitCode.OK,
}
# Machine fields that identify hardware; hostnames change per CI job and are left out.
HARDWARE_FIELDS = (
    "cpu_model",
    "cpu",
    "cpu_count",
    "logical_cpus",
    "physical_cpus",
    "memory_total_bytes",
    "memory_bytes",
    "gpus",
    "gpu",
    "gpu_names",
    "gpu_models",
    "machine",
    "arch",
)


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
    """How strict the gate is. Defaults: throughput:-5%, p99:+10%, 95% confidence."""

    thresholds: tuple[Threshold, ...] = tuple(parse_thresholds(list(DEFAULT_THRESHOLDS)))
    confidence: float = 0.95
    allow_different_load: bool = False
    allow_different_machine: bool = False
    max_error_fraction: float = 0.01
    max_dropped_fraction: float = 0.01
    max_late_fraction: float = 0.10
    min_windows: int = 3
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
    verdict: Verdict
    reason: str
    windows: tuple[int, int]  # per-window samples used (baseline, current)
    more_windows: int | None = None  # inconclusive: about how many more windows a run would settle it

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
        }


@dataclass(frozen=True)
class GateResult:
    """Every finding of one comparison, the notes on what differs, and the overall verdict."""

    model: str
    comparison: Comparison
    baseline_label: str
    current_label: str
    findings: tuple[Finding, ...]
    notes: tuple[str, ...] = ()
    changes: tuple[str, ...] = field(default_factory=tuple)  # config / server version differences

    @property
    def verdict(self) -> Verdict:
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


# -- comparability ---------------------------------------------------------------------


def _level_key(level: LevelResult) -> tuple[str, int]:
    return (level.load.label, level.batch_size)


def _protocol(record: RunRecord) -> str:
    return str(record.spec.get("protocol") or record.server.get("protocol") or "")


def _load_differences(baseline: RunRecord, current: RunRecord) -> list[str]:
    diffs = []
    b_levels = [_level_key(lv) for lv in baseline.levels]
    c_levels = [_level_key(lv) for lv in current.levels]
    if b_levels != c_levels:
        diffs.append(f"levels {_fmt_levels(b_levels)} vs {_fmt_levels(c_levels)}")
    if _protocol(baseline) != _protocol(current):
        diffs.append(f"protocol {_protocol(baseline) or '?'} vs {_protocol(current) or '?'}")
    for key in ("shapes", "shared_memory", "input_data"):
        b, c = baseline.spec.get(key), current.spec.get(key)
        if b != c and not (key == "input_data" and isinstance(b, str) and b.endswith(".json")):
            diffs.append(f"{key} {b!r} vs {c!r}")
    return diffs


def _fmt_levels(levels: Sequence[tuple[str, int]]) -> str:
    return "[" + ", ".join(label + (f" x batch {b}" if b != 1 else "") for label, b in levels) + "]"


def machine_differences(baseline: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """The hardware fields that differ between two machine dicts (hostname only if nothing else is known)."""
    keys = [k for k in HARDWARE_FIELDS if k in baseline or k in current]
    if not keys:
        keys = ["hostname"] if "hostname" in baseline or "hostname" in current else []
    return [f"{k} {baseline.get(k)!r} vs {current.get(k)!r}" for k in keys if baseline.get(k) != current.get(k)]


def config_changes(baseline: RunRecord, current: RunRecord, limit: int = 12) -> list[str]:
    """What changed between the two runs' model configs and servers, one line each."""
    out = []
    b_ver, c_ver = baseline.server.get("version"), current.server.get("version")
    if b_ver != c_ver:
        out.append(f"server version {b_ver} -> {c_ver}")
    if baseline.model.get("config_sha256") != current.model.get("config_sha256"):
        b_flat = _flatten(baseline.model.get("config") or {})
        c_flat = _flatten(current.model.get("config") or {})
        keys = sorted(set(b_flat) | set(c_flat))
        diffs = [
            f"config {k}: {b_flat.get(k, '(unset)')} -> {c_flat.get(k, '(unset)')}"
            for k in keys
            if b_flat.get(k) != c_flat.get(k)
        ]
        if not diffs:
            diffs = ["config hash differs (no field-level difference in the recorded config)"]
        out += diffs[:limit] + ([f"... and {len(diffs) - limit} more config changes"] if len(diffs) > limit else [])
    return out


def _flatten(value: Any, prefix: str = "") -> dict[str, str]:
    if isinstance(value, dict):
        flat: dict[str, str] = {}
        for k, v in value.items():
            flat.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return flat
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        flat = {}
        for i, v in enumerate(value):
            flat.update(_flatten(v, f"{prefix}[{i}]"))
        return flat
    return {prefix: json.dumps(value) if not isinstance(value, str) else value}


# -- validity --------------------------------------------------------------------------


def _level_problems(level: LevelResult, side: str, opts: GateOptions) -> list[str]:
    problems = []
    attempted = max(1, level.request_count + level.error_count)
    if level.error_count / attempted > opts.max_error_fraction:
        problems.append(
            f"{side} had {level.error_count} errors of {attempted} requests "
            f"(> {opts.max_error_fraction:.0%}): {_top_errors(level.errors)}"
        )
    sends = max(1, level.request_count + level.dropped_count)
    if level.dropped_count / sends > opts.max_dropped_fraction:
        problems.append(
            f"{side} dropped {level.dropped_count} of {sends} scheduled sends "
            f"(> {opts.max_dropped_fraction:.0%}): the load generator or server could not keep up"
        )
    if level.late_count / sends > opts.max_late_fraction:
        problems.append(
            f"{side} sent {level.late_count} of {sends} requests late (> {opts.max_late_fraction:.0%}): "
            "the offered load was not the load asked for"
        )
    return problems


def _top_errors(errors: dict[str, int]) -> str:
    if not errors:
        return "no error detail"
    top = sorted(errors.items(), key=lambda kv: -kv[1])[:2]
    return "; ".join(f"{n}x {msg[:80]}" for msg, n in top)


def _is_thin(thin: Sequence[str], pct: float) -> bool:
    for item in thin:
        text = item.lower().removeprefix("p").removesuffix("_us")
        if text == "999":
            text = "99.9"
        try:
            if float(text) == pct:
                return True
        except ValueError:
            continue
    return False


# -- the comparison --------------------------------------------------------------------


def _metric_values(level: LevelResult, metric: str, kind: LatencyKind) -> tuple[float, np.ndarray]:
    if metric == "throughput":
        return level.throughput_infer_per_s, np.array([w.infer_per_s for w in level.windows], dtype=float)
    summary = level.latency(kind)
    windows = [w for w in level.windows if w.completed > 0]
    attr = "p50_us" if metric == "p50" else "p99_us"
    return summary.percentile_us(PERCENTILE_OF[metric]), np.array([getattr(w, attr) for w in windows], dtype=float)


def _latency_kind(baseline: LevelResult, current: LevelResult) -> LatencyKind:
    if baseline.corrected is not None and current.corrected is not None:
        return "corrected"
    return "service"


def compare_records(
    baseline: RunRecord,
    current: RunRecord,
    opts: GateOptions | None = None,
    *,
    comparison: Comparison = "stored",
    baseline_label: str = "baseline",
    current_label: str = "current",
) -> GateResult:
    """Judge current against baseline; every finding is computed before anything is decided.

    Raises InputError when the records are of different models, GateRefused when load or
    machine differ and opts does not allow it.
    """
    opts = opts or GateOptions()
    b_model, c_model = baseline.model.get("name"), current.model.get("name")
    if b_model != c_model:
        raise InputError(
            f"baseline {baseline_label} is of model {b_model!r} but current {current_label} is of model {c_model!r}",
            hint="pick the baseline of the same model",
        )
    notes: list[str] = []
    checks = (
        ("load", _load_differences(baseline, current), opts.allow_different_load,
         "measure both with the same levels, batch size and protocol, or pass --allow-different-load",
         "; only the levels both runs have are compared"),
        ("machine", machine_differences(baseline.machine, current.machine), opts.allow_different_machine,
         "gate against a baseline measured on this kind of machine, or pass --allow-different-machine", ""),
    )  # fmt: skip
    for what, diffs, allowed, hint, consequence in checks:
        if not diffs:
            continue
        text = "; ".join(diffs)
        if not allowed:
            raise GateRefused(f"refusing to compare: the {what} differs ({text})", hint=hint)
        notes.append(f"{what} differs (allowed): {text}{consequence}")
    for side, rec in (("baseline", baseline), ("current", current)):
        if not rec.levels:
            notes.append(f"{side} has no measured levels")
    changes = config_changes(baseline, current)

    b_by_key = {_level_key(lv): lv for lv in baseline.levels}
    findings: list[Finding] = []
    for c_level in current.levels:
        b_level = b_by_key.get(_level_key(c_level))
        if b_level is None:
            continue
        findings += _compare_level(baseline, current, b_level, c_level, opts)
    missing = [k for k in b_by_key if k not in {_level_key(lv) for lv in current.levels}]
    if missing and opts.allow_different_load:
        notes.append(f"not in current, not compared: {_fmt_levels(missing)}")
    return GateResult(
        model=str(c_model),
        comparison=comparison,
        baseline_label=baseline_label,
        current_label=current_label,
        findings=tuple(findings),
        notes=tuple(notes),
        changes=tuple(changes),
    )


def _compare_level(
    baseline: RunRecord, current: RunRecord, b: LevelResult, c: LevelResult, opts: GateOptions
) -> list[Finding]:
    label = c.load.label + (f" x batch {c.batch_size}" if c.batch_size != 1 else "")
    kind = _latency_kind(b, c)
    problems = _level_problems(b, "baseline", opts) + _level_problems(c, "current", opts)
    for side, rec in (("baseline", baseline), ("current", current)):
        if rec.status != "ok":
            problems.append(f"{side} run is {rec.status}: {rec.error or 'no detail'}")
    out = []
    for thr in opts.thresholds:
        if thr.metric in STREAM_METRICS:
            out.append(_compare_stream_metric(label, b, c, thr, problems, opts))
            continue
        is_tput = thr.metric == "throughput"
        unit = "infer/s" if is_tput else "us"
        lat_kind: LatencyKind | None = None if is_tput else kind
        b_val, b_win = _metric_values(b, thr.metric, kind)
        c_val, c_win = _metric_values(c, thr.metric, kind)
        windows = (len(b_win), len(c_win))
        base = {
            "level": label,
            "metric": thr.metric,
            "unit": unit,
            "latency_kind": lat_kind,
            "baseline": b_val,
            "current": c_val,
            "threshold": thr.text,
            "windows": windows,
        }
        invalid = list(problems)
        if not is_tput:
            pct = PERCENTILE_OF[thr.metric]
            need = min_samples(pct)
            counts = {side: lv.latency(kind).count for side, lv in (("baseline", b), ("current", c))}
            short = [f"{side} has {n}" for side, n in counts.items() if n < need]
            if short:
                invalid.append(
                    f"{thr.metric} needs at least {need} samples to be certified at all (MLPerf early-stopping "
                    f"rule) and {', '.join(short)}: measure longer or at a higher load"
                )
            for side, lv in (("baseline", b), ("current", c)):
                if not short and _is_thin(lv.latency(kind).thin, pct):
                    invalid.append(f"{side}'s {thr.metric} is marked thin (too few samples beyond it)")
        if invalid:
            out.append(_finding(base, None, None, "invalid", "; ".join(invalid)))
            continue
        out.append(_judge(base, thr, b_win, c_win, opts))
    return out


def _compare_stream_metric(
    label: str, b: LevelResult, c: LevelResult, thr: Threshold, problems: list[str], opts: GateOptions
) -> Finding:
    # Streaming metrics (TTFT, ITL, tokens/s) are judged like the others: threshold, then
    # significance over per-window values; a side without streaming figures is invalid.
    bv, cv = stream_values(b, thr.metric), stream_values(c, thr.metric)
    base = {
        "level": label,
        "metric": thr.metric,
        "unit": "tokens/s" if thr.metric == "tokens" else "us",
        "latency_kind": None if thr.metric == "tokens" else "service",
        "baseline": bv[0] if bv else 0.0,
        "current": cv[0] if cv else 0.0,
        "threshold": thr.text,
        "windows": (len(bv[1]) if bv else 0, len(cv[1]) if cv else 0),
    }
    invalid = list(problems)
    for side, values in (("baseline", bv), ("current", cv)):
        if values is None:
            invalid.append(f"{side} has no streaming figures (measure with --streaming)")
    summaries = [(side, stream_summary(lv, thr.metric)) for side, lv in (("baseline", b), ("current", c))]
    if not invalid:
        pct = STREAM_METRICS[thr.metric][1]
        for side, summary in summaries:
            if summary is not None and summary.count < min_samples(pct):
                invalid.append(f"{side} has {summary.count} samples; {thr.metric} needs {min_samples(pct)}")
    if invalid or bv is None or cv is None:
        return _finding(base, None, None, "invalid", "; ".join(invalid))
    return _judge(base, thr, bv[1], cv[1], opts)


def _finding(
    base: dict[str, Any],
    stats: DiffStats | None,
    conf: float | None,
    verdict: Verdict,
    reason: str,
    *,
    ci: tuple[float, float] | None = None,
    more: int | None = None,
) -> Finding:
    b_val, c_val = base["baseline"], base["current"]
    delta = c_val - b_val
    delta_pct = (delta / b_val * 100.0) if b_val else None
    return Finding(
        **base,
        delta=delta,
        delta_pct=delta_pct,
        ci_pct=ci,
        confidence=conf,
        cohens_d=stats.cohens_d if stats else None,
        verdict=verdict,
        reason=reason,
        more_windows=more,
    )


def _judge(base: dict[str, Any], thr: Threshold, b_win: np.ndarray, c_win: np.ndarray, opts: GateOptions) -> Finding:
    b_val, c_val = float(base["baseline"]), float(base["current"])
    sign = -1.0 if thr.higher_is_better else 1.0  # worse = sign * change > 0
    point_rel = (c_val - b_val) / b_val if b_val else 0.0
    worse_pct, worse_abs = sign * point_rel * 100.0, sign * (c_val - b_val)
    exceeded = thr.exceeded(worse_pct, worse_abs)
    better_exceeded = thr.exceeded(-worse_pct, -worse_abs)
    n_min = min(len(b_win), len(c_win))
    if n_min < max(2, opts.min_windows) or not b_val:
        few_more = max(1, opts.min_windows - n_min)
        if exceeded:
            reason = (
                f"{_worse_text(thr, worse_pct)} but {n_min} window(s) cannot tell it from noise; "
                f"about {few_more} more windows per run would"
            )
            return _finding(base, None, None, "inconclusive", reason, more=few_more)
        return _finding(base, None, None, "pass", f"within {thr.text} ({n_min} window(s): noise not estimated)")
    stats = bootstrap_rel_diff(b_win, c_win, n_boot=opts.n_boot, seed=opts.seed, level=(1 + opts.confidence) / 2)
    lo, hi = stats.interval(point_rel, opts.confidence)
    ci = (lo * 100.0, hi * 100.0)
    p_up = stats.prob_positive(point_rel)
    conf = p_up if point_rel >= 0 else 1.0 - p_up
    significant = conf >= (1.0 + opts.confidence) / 2.0  # the two-sided interval excludes zero
    conf_text = f"confidence {conf:.1%}"
    if exceeded and significant:
        return _finding(base, stats, conf, "regression", f"{_worse_text(thr, worse_pct)}, {conf_text}", ci=ci)
    if exceeded:
        margin = stats.one_sided_margin(point_rel, (1.0 + opts.confidence) / 2.0)
        scale = (margin / abs(point_rel)) ** 2 if point_rel else math.inf
        needed = math.ceil(max(stats.n_baseline, stats.n_current) * scale) if math.isfinite(scale) else None
        more = max(1, needed - n_min) if needed is not None else None
        more_text = f"about {more} more windows per run would settle it" if more else "more windows would settle it"
        reason = (
            f"{_worse_text(thr, worse_pct)} but only {conf_text} (needs {(1 + opts.confidence) / 2:.1%}); {more_text}"
        )
        return _finding(base, stats, conf, "inconclusive", reason, ci=ci, more=more)
    if better_exceeded and significant:
        better = "higher" if thr.higher_is_better else "lower"
        reason = f"{thr.metric} {abs(worse_pct):.1f}% {better} (better past {thr.text}), {conf_text}"
        return _finding(base, stats, conf, "improvement", reason, ci=ci)
    return _finding(base, stats, conf, "pass", f"within {thr.text}", ci=ci)


def _worse_text(thr: Threshold, worse_pct: float) -> str:
    direction = "lower" if thr.higher_is_better else "higher"
    return f"{thr.metric} {abs(worse_pct):.1f}% {direction}, past {thr.text}"

"""The one comparison core: two sides' runs, level by level and metric by metric; pure over records.

The gate's verdicts and the comparison report both render what compare_runs() returns, so
they cannot disagree: levels paired by one rule (perfkit.gate._pairing), repeated runs pooled
exactly (or refused), each percentile threshold judged on that percentile's own per-window
values, one significance rule (a seeded bootstrap over windows).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
from collections.abc import Sequence
from statistics import NormalDist
from typing import Any

import numpy as np

from perfkit.errors import InputError
from perfkit.gate._machine import Evidence, machine_checked
from perfkit.gate._mix import mix_views, threshold_scope
from perfkit.gate._pairing import (
    config_changes,
    fmt_levels,
    level_label,
    load_differences,
    pooled_levels,
)
from perfkit.gate._results import (
    EXIT_OF,
    VERDICT_ORDER,
    BaselineKind,
    Finding,
    FindingVerdict,
    GateFailed,
    GateOptions,
    GateRefused,
    GateResult,
)
from perfkit.gate.stats import DiffStats, bootstrap_rel_diff, min_samples
from perfkit.gate.stream_metrics import STREAM_METRICS, stream_summary, stream_values
from perfkit.gate.thresholds import PERCENTILE_OF, Threshold
from perfkit.records import LatencyKind, LevelResult, Machine, RunRecord

__all__ = [  # the results' types live in _results; imported from here as before
    "EXIT_OF",
    "VERDICT_ORDER",
    "BaselineKind",
    "Finding",
    "FindingVerdict",
    "GateFailed",
    "GateOptions",
    "GateRefused",
    "GateResult",
    "compare_records",
    "compare_runs",
    "machine_differences",
]
_log = logging.getLogger(__name__)


# -- comparability ---------------------------------------------------------------------


def machine_differences(baseline: Machine, current: Machine) -> list[str]:
    """The hardware differences of two machines (the rule is Machine.differences, in records)."""
    return baseline.differences(current)


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


def _metric_values(level: LevelResult, metric: str, kind: LatencyKind) -> tuple[float, np.ndarray | None]:
    """The level's figure of a metric and its per-window values: the metric's own evidence.

    A percentile's windows are that percentile per window (p95 judged on per-window p95s);
    None when the record did not keep them (written by an older perfkit).
    """
    if metric == "throughput":
        return level.throughput_infer_per_s, np.array([w.infer_per_s for w in level.windows], dtype=float)
    pct = PERCENTILE_OF[metric]
    values = [w.percentile_us(pct) for w in level.windows if w.completed > 0]
    if any(v is None for v in values):
        return level.latency(kind).percentile_us(pct), None
    return level.latency(kind).percentile_us(pct), np.array(values, dtype=float)


def _latency_kind(baseline: LevelResult, current: LevelResult) -> LatencyKind:
    if baseline.corrected is not None and current.corrected is not None:
        return "corrected"
    return "service"


def compare_records(
    baseline: RunRecord,
    current: RunRecord,
    opts: GateOptions | None = None,
    *,
    comparison: BaselineKind = "stored",
    baseline_label: str = "baseline",
    current_label: str = "current",
) -> GateResult:
    """Judge one current run against one baseline run (see compare_runs); a traffic mix's whole-mix verdict.

    Raises InputError when the records are of different models (or mixes), GateRefused when
    load or machine differ and opts does not allow it.
    """
    return compare_pair(
        baseline, current, opts, comparison=comparison, baseline_label=baseline_label, current_label=current_label
    )[0]


def compare_pair(
    baseline: RunRecord,
    current: RunRecord,
    opts: GateOptions | None = None,
    *,
    comparison: BaselineKind = "stored",
    baseline_label: str = "baseline",
    current_label: str = "current",
) -> list[GateResult]:
    """Judge one current run against one baseline run: one result, or for a traffic mix the whole
    mix's and then each model's. Raises like compare_records."""
    b_model, c_model = baseline.spec.mix_label, current.spec.mix_label
    if baseline.model.name != current.model.name or b_model != c_model:
        what = {False: "model", True: "traffic mix"}
        raise InputError(
            f"baseline {baseline_label} is of {what[bool(baseline.spec.mix)]} {b_model!r} but current "
            f"{current_label} is of {what[bool(current.spec.mix)]} {c_model!r}",
            hint="pick the baseline of the same model (or the same mix)",
        )
    return compare_runs(
        [baseline], [current], opts, comparison=comparison, baseline_label=baseline_label, current_label=current_label
    )


def compare_runs(
    baseline: Sequence[RunRecord],
    current: Sequence[RunRecord],
    opts: GateOptions | None = None,
    *,
    comparison: BaselineKind = "stored",
    baseline_label: str = "baseline",
    current_label: str = "current",
) -> list[GateResult]:
    """Judge the current runs against the baseline runs, one result per model present on both sides.

    Repeated runs of a level on one side are pooled exactly first. Every finding is computed
    before anything is decided. Raises GateRefused when load or machine differ and opts does
    not allow it, InputError when repeated runs cannot be pooled exactly.
    """
    opts = opts or GateOptions()
    baseline, current = mix_views(baseline), mix_views(current)
    models = list(dict.fromkeys(str(r.model.name) for r in current))
    results = []
    for model in models:
        b_runs = [r for r in baseline if str(r.model.name) == model]
        c_runs = [r for r in current if str(r.model.name) == model]
        if not b_runs:
            _log.info("%s: no baseline run of this model; not compared", model)
            continue
        scoped = dataclasses.replace(opts, thresholds=_thresholds_for(opts.thresholds, threshold_scope(model)))
        result = _compare_model(model, b_runs, c_runs, scoped, comparison, baseline_label, current_label)
        _log.info(
            "%s: %s (%d findings) %s vs %s", model, result.verdict, len(result.findings), current_label, baseline_label
        )
        results.append(result)
    return results


def _thresholds_for(thresholds: Sequence[Threshold], scope: str) -> tuple[Threshold, ...]:
    """The thresholds that judge a model's figures: its own (MODEL:METRIC:...) over the unscoped ones of a metric."""
    own = [t for t in thresholds if scope and t.model == scope]
    mine = {t.metric for t in own}
    return tuple([t for t in thresholds if not t.model and t.metric not in mine] + own)


def _compare_model(
    model: str,
    baseline: Sequence[RunRecord],
    current: Sequence[RunRecord],
    opts: GateOptions,
    comparison: BaselineKind,
    baseline_label: str,
    current_label: str,
) -> GateResult:
    notes: list[str] = []
    checks = (
        ("load", load_differences(baseline[0], current[0]), opts.allow_different_load,
         "measure both with the same levels, batch size and protocol, or pass --allow-different-load",
         "; only the levels both runs have are compared"),
        ("machine", machine_differences(baseline[0].machine, current[0].machine), opts.allow_different_machine,
         "gate against a baseline measured on this kind of machine, or pass --allow-different-machine", ""),
    )  # fmt: skip
    for what, diffs, allowed, hint, consequence in checks:
        if not diffs:
            continue
        text = "; ".join(diffs)
        if not allowed:
            raise GateRefused(f"refusing to compare: the {what} differs ({text})", hint=hint)
        notes.append(f"{what} differs (allowed): {text}{consequence}")
    for side, runs in (("baseline", baseline), ("current", current)):
        if not any(rec.levels for rec in runs):
            notes.append(f"{side} has no measured levels")
        if len(runs) > 1:
            notes.append(f"{side}: {len(runs)} runs pooled (histograms added, windows concatenated)")
    problems = [
        f"{side} run is {rec.status}: {rec.error or 'no detail'}"
        for side, runs in (("baseline", baseline), ("current", current))
        for rec in runs
        if rec.status != "ok"
    ]
    if comparison == "stored":
        allowed_noise = ", ".join(f"{t.metric} ±{opts.job_noise_pct.get(t.metric, 0.0):g}%" for t in opts.thresholds)
        notes.append(f"job-to-job noise allowed (stored baseline, per job; --job-noise): {allowed_noise}")
    b_levels, c_levels = pooled_levels(baseline), pooled_levels(current)
    findings: list[Finding] = []
    for key, c_level in c_levels.items():
        if key in b_levels:
            findings += _compare_level(b_levels[key], c_level, problems, opts, comparison)
    unmatched = [lv for key, lv in b_levels.items() if key not in c_levels]
    if unmatched and opts.allow_different_load:
        notes.append(f"not in current, not compared: {fmt_levels(unmatched)}")
    return GateResult(
        model=model,
        comparison=comparison,
        baseline_label=baseline_label,
        current_label=current_label,
        findings=tuple(findings),
        notes=tuple(notes),
        changes=tuple(config_changes(baseline[0], current[-1])),
    )


def _compare_level(
    b: LevelResult, c: LevelResult, run_problems: list[str], opts: GateOptions, comparison: BaselineKind
) -> list[Finding]:
    kind = _latency_kind(b, c)

    def job_sd(metric: str) -> float:  # a stored baseline carries two jobs' noise; A/B shares one job
        return opts.job_noise_pct.get(metric, 0.0) / 100.0 if comparison == "stored" else 0.0

    problems = _level_problems(b, "baseline", opts) + _level_problems(c, "current", opts) + run_problems
    out = []
    for thr in opts.thresholds:
        if thr.metric in STREAM_METRICS:
            out.append(_compare_stream_metric(b, c, thr, problems, opts, job_sd(thr.metric)))
            continue
        is_tput = thr.metric == "throughput"
        b_val, b_win = _metric_values(b, thr.metric, kind)
        c_val, c_win = _metric_values(c, thr.metric, kind)
        base = {
            "level": level_label(c),
            "metric": thr.metric,
            "unit": "infer/s" if is_tput else "us",
            "latency_kind": None if is_tput else kind,
            "baseline": b_val,
            "current": c_val,
            "threshold": thr.text,
            "windows": (0 if b_win is None else len(b_win), 0 if c_win is None else len(c_win)),
        }
        invalid = list(problems)
        if not is_tput:
            invalid += _percentile_problems(thr.metric, b, c, kind)
            stale = [side for side, w in (("baseline", b_win), ("current", c_win)) if w is None]
            if stale:
                invalid.append(
                    f"{' and '.join(stale)} kept no per-window {thr.metric} (a record of an older perfkit): "
                    "re-profile to judge this threshold"
                )
        if invalid or b_win is None or c_win is None:
            out.append(_finding(base, None, None, "invalid", "; ".join(invalid)))
            continue
        finding = _decide(base, thr, b_win, c_win, opts, job_sd(thr.metric))
        if comparison == "stored":
            evidence = Evidence(
                list(b_win), list(c_win), functools.partial(_decide_part, base, thr, opts, job_sd(thr.metric))
            )
            finding = machine_checked(finding, b, c, evidence)
        out.append(finding)
    return out


def _decide_part(
    base: dict[str, Any], thr: Threshold, opts: GateOptions, job_sd: float, b_win: list[float], c_win: list[float]
) -> Finding:
    """_decide on a part of each run's windows, its figures their means."""
    part = dict(base, baseline=float(np.mean(b_win)), current=float(np.mean(c_win)))
    return _decide(part, thr, np.array(b_win, dtype=float), np.array(c_win, dtype=float), opts, job_sd)


def _compare_stream_metric(
    b: LevelResult, c: LevelResult, thr: Threshold, problems: list[str], opts: GateOptions, job_sd: float
) -> Finding:
    # Streaming metrics (TTFT, ITL, tokens/s) are judged like the others: threshold, then
    # significance over per-window values; a side without streaming figures is invalid.
    bv, cv = stream_values(b, thr.metric), stream_values(c, thr.metric)
    base = {
        "level": level_label(c),
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
    if not invalid:
        pct = STREAM_METRICS[thr.metric][1]
        for side, lv in (("baseline", b), ("current", c)):
            summary = stream_summary(lv, thr.metric)
            if summary is not None and summary.count < min_samples(pct):
                invalid.append(f"{side} has {summary.count} samples; {thr.metric} needs {min_samples(pct)}")
    if invalid or bv is None or cv is None:
        return _finding(base, None, None, "invalid", "; ".join(invalid))
    return _decide(base, thr, bv[1], cv[1], opts, job_sd)


def _percentile_problems(metric: str, b: LevelResult, c: LevelResult, kind: LatencyKind) -> list[str]:
    pct = PERCENTILE_OF[metric]
    need = min_samples(pct)
    counts = {side: lv.latency(kind).count for side, lv in (("baseline", b), ("current", c))}
    short = [f"{side} has {n}" for side, n in counts.items() if n < need]
    if short:
        return [
            f"{metric} needs at least {need} samples to be certified at all (MLPerf early-stopping "
            f"rule) and {', '.join(short)}: measure longer or at a higher load"
        ]
    return [
        f"{side}'s {metric} is marked thin (too few samples beyond it)"
        for side, lv in (("baseline", b), ("current", c))
        if _is_thin(lv.latency(kind).thin, pct)
    ]


def _finding(
    base: dict[str, Any],
    stats: DiffStats | None,
    conf: float | None,
    verdict: FindingVerdict,
    reason: str,
    *,
    ci: tuple[float, float] | None = None,
    more: int | None = None,
    past: bool = False,
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
        past_threshold=past,
    )


def _decide(
    base: dict[str, Any], thr: Threshold, b_win: np.ndarray, c_win: np.ndarray, opts: GateOptions, job_sd: float
) -> Finding:
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
    within = bootstrap_rel_diff(b_win, c_win, n_boot=opts.n_boot, seed=opts.seed, level=(1 + opts.confidence) / 2)
    stats = within.with_job_noise(job_sd, seed=opts.seed)  # zero for A/B: both arms in one job
    lo, hi = stats.interval(point_rel, opts.confidence)
    ci = (lo * 100.0, hi * 100.0)
    p_up = stats.prob_positive(point_rel)
    conf = p_up if point_rel >= 0 else 1.0 - p_up
    need = (1.0 + opts.confidence) / 2.0
    significant = conf >= need  # the two-sided interval excludes zero
    conf_text = f"confidence {conf:.1%}"
    if exceeded and significant:
        reason = f"{_worse_text(thr, worse_pct)}, {conf_text}"
        return _finding(base, stats, conf, "regression", reason, ci=ci, past=True)
    if exceeded and _within_job_noise(point_rel, job_sd, need):
        # No number of windows can settle it: two jobs' own speeds differ this much with
        # nothing changed, so a stored baseline cannot call it a regression.
        reason = (
            f"{_worse_text(thr, worse_pct)} but within the noise between two jobs "
            f"(±{job_sd:.0%} per job for {thr.metric}, a stored baseline; {conf_text}): "
            "measure with gate --ab, or lower --job-noise for quieter runners"
        )
        return _finding(base, stats, conf, "pass", reason, ci=ci, past=True)
    if exceeded:
        margin = within.one_sided_margin(point_rel, need)
        scale = (margin / abs(point_rel)) ** 2 if point_rel else math.inf
        needed = math.ceil(max(within.n_baseline, within.n_current) * scale) if math.isfinite(scale) else None
        more = max(1, needed - n_min) if needed is not None else None
        more_text = f"about {more} more windows per run would settle it" if more else "more windows would settle it"
        reason = f"{_worse_text(thr, worse_pct)} but only {conf_text} (needs {need:.1%}); {more_text}"
        return _finding(base, stats, conf, "inconclusive", reason, ci=ci, more=more, past=True)
    if better_exceeded and significant:
        better = "higher" if thr.higher_is_better else "lower"
        reason = f"{thr.metric} {abs(worse_pct):.1f}% {better} (better past {thr.text}), {conf_text}"
        return _finding(base, stats, conf, "improvement", reason, ci=ci)
    return _finding(base, stats, conf, "pass", f"within {thr.text}", ci=ci)


def _within_job_noise(point_rel: float, job_sd: float, need: float) -> bool:
    """Whether two job factors alone (lognormal, sd `job_sd` each) put a change this large
    inside the one-sided `need` bound."""
    if job_sd <= 0.0 or point_rel <= -1.0:
        return False
    return abs(math.log1p(point_rel)) <= NormalDist().inv_cdf(need) * math.sqrt(2.0) * job_sd


def _worse_text(thr: Threshold, worse_pct: float) -> str:
    direction = "lower" if thr.higher_is_better else "higher"
    return f"{thr.metric} {abs(worse_pct):.1f}% {direction}, past {thr.text}"

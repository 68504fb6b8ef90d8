"""Comparison data: baseline vs current runs, per load level and metric, with direction-aware verdicts."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from perfkit.records import LevelResult, RunRecord
from perfkit.report._figure_types import BarFigure, BarSeries, LineFigure, Series, Table

# Below this relative change (%), a difference is shown as unchanged even with perfect precision.
MIN_CHANGE_PCT = 1.0
# Used as the noise band when a level reports no precision.
DEFAULT_NOISE_PCT = 3.0


@dataclass(frozen=True)
class Metric:
    """A compared figure: its name, how to read it from a level, and which direction is better."""

    name: str
    unit: str
    get: Callable[[LevelResult], float]
    higher_is_better: bool
    noise: Callable[[LevelResult], float | None]


def _lat(attr: str) -> Callable[[LevelResult], float]:
    return lambda lv: float(getattr(lv.latency(), attr)) / 1000.0


def _thr_noise(lv: LevelResult) -> float | None:
    return lv.precision.throughput_rel


def _lat_noise(lv: LevelResult) -> float | None:
    return lv.precision.latency_rel


METRICS = (
    Metric("throughput", "infer/s", lambda lv: lv.throughput_infer_per_s, True, _thr_noise),
    Metric("p50 latency", "ms", _lat("p50_us"), False, _lat_noise),
    Metric("p90 latency", "ms", _lat("p90_us"), False, _lat_noise),
    Metric("p99 latency", "ms", _lat("p99_us"), False, _lat_noise),
    Metric("p99.9 latency", "ms", _lat("p999_us"), False, _lat_noise),
    Metric("mean latency", "ms", _lat("mean_us"), False, _lat_noise),
    Metric("errors", "", lambda lv: float(lv.error_count), False, lambda lv: None),
)

LevelKey = tuple[str, str, float, str, int]


def level_key(record: RunRecord, lv: LevelResult) -> LevelKey:
    """What makes two levels comparable: model, load mode and value, distribution, batch size."""
    return (
        str(record.model.get("name", "")),
        lv.load.mode,
        lv.load.value,
        lv.load.distribution or "",
        lv.batch_size,
    )


@dataclass(frozen=True)
class Delta:
    """One metric at one level: baseline and current values, the change, and whether it is better or worse."""

    level: str
    metric: str
    unit: str
    baseline: float
    current: float
    delta_pct: float | None  # None when the baseline is zero
    noise_pct: float
    verdict: str  # 'better', 'worse' or 'same'
    higher_is_better: bool


@dataclass(frozen=True)
class Comparison:
    """Baseline against one current group (runs of one config)."""

    label: str
    deltas: tuple[Delta, ...]
    unmatched: tuple[str, ...]  # levels present on one side only


def _aggregate(records: list[RunRecord]) -> dict[LevelKey, list[LevelResult]]:
    out: dict[LevelKey, list[LevelResult]] = {}
    for rec in records:
        for lv in rec.levels:
            out.setdefault(level_key(rec, lv), []).append(lv)
    return out


def _label(key: LevelKey, levels: list[LevelResult], multi_model: bool) -> str:
    base = levels[0].load.label + (f", batch {key[4]}" if key[4] != 1 else "")
    return f"{key[0]}: {base}" if multi_model else base


def judge(base: float, cur: float, higher_is_better: bool, noise_pct: float) -> tuple[float | None, str]:
    """The relative change (%) and 'better'/'worse'/'same', beyond a noise band; direction-aware."""
    if base == 0:
        if cur == 0:
            return 0.0, "same"
        return None, "better" if (cur > 0) == higher_is_better else "worse"
    delta = (cur - base) / abs(base) * 100.0
    if abs(delta) <= max(noise_pct, MIN_CHANGE_PCT):
        return delta, "same"
    return delta, "better" if (delta > 0) == higher_is_better else "worse"


def compare(baseline: list[RunRecord], current: list[RunRecord], label: str = "current") -> Comparison:
    """Every metric of every level present in both; repeated runs of a level are averaged."""
    base = _aggregate(baseline)
    cur = _aggregate(current)
    multi_model = len({k[0] for k in (*base, *cur)}) > 1
    deltas = []
    for key, b_levels in base.items():
        c_levels = cur.get(key)
        if not c_levels:
            continue
        name = _label(key, b_levels, multi_model)
        for m in METRICS:
            b = sum(m.get(lv) for lv in b_levels) / len(b_levels)
            c = sum(m.get(lv) for lv in c_levels) / len(c_levels)
            rel = [m.noise(lv) for lv in (*b_levels, *c_levels)]
            known = [r for r in rel if r is not None]
            if m.name == "errors":
                noise = 0.0
            elif known:
                # Relative CI half-widths of the two sides combine in quadrature.
                noise = 100.0 * math.hypot(
                    max(m.noise(lv) or 0.0 for lv in b_levels), max(m.noise(lv) or 0.0 for lv in c_levels)
                )
            else:
                noise = DEFAULT_NOISE_PCT
            delta, verdict = judge(b, c, m.higher_is_better, noise)
            deltas.append(Delta(name, m.name, m.unit, b, c, delta, noise, verdict, m.higher_is_better))
    unmatched = tuple(
        _label(k, v, multi_model) + (" (baseline only)" if k in base else " (current only)")
        for k, v in (*base.items(), *cur.items())
        if (k in base) != (k in cur)
    )
    return Comparison(label, tuple(deltas), unmatched)


def group_current(current: list[RunRecord]) -> list[tuple[str, list[RunRecord]]]:
    """Current runs grouped by served config where one model has several (repeats of a config are averaged).

    Runs of different models with one config each stay one group: levels only pair within a model anyway.
    """
    configs: dict[str, set[str]] = {}
    for rec in current:
        configs.setdefault(str(rec.model.get("name", "")), set()).add(str(rec.model.get("config_sha256", "")))
    if all(len(shas) <= 1 for shas in configs.values()):
        return [("current", current)]
    groups: dict[tuple[str, str], list[RunRecord]] = {}
    for rec in current:
        key = (str(rec.model.get("name", "")), str(rec.model.get("config_sha256", "")))
        groups.setdefault(key, []).append(rec)
    multi_model = len(configs) > 1
    return [
        (f"current: {name + ' ' if multi_model else ''}config {sha[:8] or '?'}", recs)
        for (name, sha), recs in groups.items()
    ]


def delta_table(comp: Comparison) -> Table:
    """Rows of level, metric, baseline, current, change %, verdict; cells classed better/worse."""
    rows = []
    classes = []
    for d in comp.deltas:
        rows.append(
            (
                d.level,
                d.metric + (f" ({d.unit})" if d.unit else ""),
                d.baseline,
                d.current,
                d.delta_pct,
                d.noise_pct,
                d.verdict,
            )
        )
        cls = {"better": "good", "worse": "bad"}.get(d.verdict, "")
        classes.append(("", "", "", "", cls, "", cls))
    return Table(
        key="deltas",
        title=f"Baseline vs {comp.label}, per level and metric",
        columns=("load", "metric", "baseline", "current", "change %", "noise ± %", "verdict"),
        rows=tuple(rows),
        note="Green is better, red is worse: for latency and errors lower is better, for throughput higher. "
        "Changes within the combined confidence intervals of the two runs (noise) count as unchanged.",
        cell_classes=tuple(classes),
    )


def delta_figure(comp: Comparison) -> BarFigure | None:
    """Improvement (%) of throughput, p50 and p99 per level, signed so that up is always better."""
    levels = list(dict.fromkeys(d.level for d in comp.deltas))
    if not levels:
        return None
    series = []
    for metric in ("throughput", "p50 latency", "p99 latency"):
        by_level = {
            d.level: None if d.delta_pct is None else (d.delta_pct if d.higher_is_better else -d.delta_pct)
            for d in comp.deltas
            if d.metric == metric
        }
        series.append(BarSeries(metric, tuple(by_level.get(lv) for lv in levels), group=metric))
    return BarFigure(
        key="deltas",
        title=f"Improvement over baseline ({comp.label})",
        category_label="load level",
        value_label="improvement (%), up is better",
        categories=tuple(levels),
        series=tuple(series),
        zero_line=True,
        caption="Signed so that up is better for every metric: throughput gained, latency saved. "
        "The table below gives the raw changes.",
    )


def overlay_figure(groups: list[tuple[str, list[RunRecord]]]) -> LineFigure:
    """Throughput vs p50/p99 latency curves of baseline and current runs on one figure."""
    series = []
    for name, records in groups:
        for rec_i, rec in enumerate(records):
            suffix = f" #{rec_i + 1}" if len(records) > 1 else ""
            for pct, attr in (("p50", "p50_us"), ("p99", "p99_us")):
                pts = tuple((lv.throughput_infer_per_s, getattr(lv.latency(), attr) / 1000.0) for lv in rec.levels)
                series.append(Series(f"{name}{suffix} {pct}", pts, group=name, variant=pct))
    return LineFigure(
        key="compare-curve",
        title="Throughput vs latency, baseline and current",
        x_label="throughput (infer/s)",
        y_label="latency (ms)",
        series=tuple(series),
        caption="Down and to the right is better.",
    )


def findings_table(findings: list[dict[str, Any]]) -> Table:
    """The gate's per-metric verdicts as given (metric, baseline, current, delta_pct, verdict, confidence)."""
    cols = ("metric", "baseline", "current", "delta_pct", "verdict", "confidence")
    rows = []
    classes = []
    for f in findings:
        rows.append(tuple(f.get(c) for c in cols))
        verdict = str(f.get("verdict", "")).lower()
        if any(w in verdict for w in ("regress", "worse", "fail")):
            cls = "bad"
        elif any(w in verdict for w in ("improv", "better")):
            cls = "good"
        elif "inconclusive" in verdict:
            cls = "warn"
        else:
            cls = ""
        classes.append(("", "", "", cls, cls, ""))
    return Table(
        key="findings",
        title="Gate verdicts",
        columns=("metric", "baseline", "current", "change %", "verdict", "confidence"),
        rows=tuple(rows),
        cell_classes=tuple(classes),
    )

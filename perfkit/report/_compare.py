"""Comparison data: baseline vs current runs as the comparison core (perfkit.gate) judges them.

The report renders the gate's own results, so a report and `perfkit gate` never disagree.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from perfkit.gate import Finding, GateOptions, GateResult, compare_runs
from perfkit.records import RunRecord
from perfkit.report._figure_types import BarFigure, BarSeries, LineFigure, Series, Table


def judge_groups(
    baseline: Sequence[RunRecord],
    groups: Sequence[tuple[str, Sequence[RunRecord]]],
    options: GateOptions | None = None,
) -> list[tuple[str, list[GateResult]]]:
    """The comparison core's results for each current group, as the gate would judge them.

    The report shows every pair, so differences of load or machine are allowed here and
    named in the results' notes instead of refused. Raises InputError when repeated runs
    cannot be pooled exactly.
    """
    opts = dataclasses.replace(options or GateOptions(), allow_different_load=True, allow_different_machine=True)
    return [(label, compare_runs(baseline, recs, opts, current_label=label)) for label, recs in groups]


def _signed_improvement(f: Finding) -> float | None:
    if f.delta_pct is None:
        return None
    return f.delta_pct if f.metric == "throughput" else -f.delta_pct


_CLASS = {"regression": "bad", "improvement": "good", "inconclusive": "warn", "invalid": "warn"}


def group_current(current: list[RunRecord]) -> list[tuple[str, list[RunRecord]]]:
    """Current runs grouped by served config where one model has several (repeats of a config are averaged).

    Runs of different models with one config each stay one group: levels only pair within a model anyway.
    """
    configs: dict[str, set[str]] = {}
    for rec in current:
        configs.setdefault(str(rec.model.name), set()).add(str(rec.model.served_config_sha256))
    if all(len(shas) <= 1 for shas in configs.values()):
        return [("current", current)]
    groups: dict[tuple[str, str], list[RunRecord]] = {}
    for rec in current:
        key = (str(rec.model.name), str(rec.model.served_config_sha256))
        groups.setdefault(key, []).append(rec)
    multi_model = len(configs) > 1
    return [
        (f"current: {name + ' ' if multi_model else ''}config {sha[:8] or '?'}", recs)
        for (name, sha), recs in groups.items()
    ]


def delta_table(label: str, results: Sequence[GateResult]) -> Table:
    """One row per level and judged metric: values, change, its interval, the gate's verdict and why."""
    rows = []
    classes = []
    multi_model = len(results) > 1
    for r in results:
        for f in r.findings:
            level = f"{r.model}: {f.level}" if multi_model else f.level
            ci = None if f.ci_pct is None else f"[{f.ci_pct[0]:+.1f}, {f.ci_pct[1]:+.1f}]"
            rows.append((level, f"{f.metric} ({f.unit})", f.baseline, f.current, f.delta_pct, ci, f.verdict, f.reason))
            cls = _CLASS.get(f.verdict, "")
            classes.append(("", "", "", "", cls, "", cls, ""))
    return Table(
        key="deltas",
        title=f"Baseline vs {label}: the gate's verdict per level and threshold",
        columns=("load", "metric", "baseline", "current", "change %", "interval %", "verdict", "why"),
        rows=tuple(rows),
        note="The same verdicts `perfkit gate` gives on these records with these thresholds: "
        + ", ".join(sorted({f.threshold for r in results for f in r.findings}))
        + ". A change counts only when it is past its threshold and significant over the per-window values.",
        cell_classes=tuple(classes),
    )


def delta_figure(label: str, results: Sequence[GateResult]) -> BarFigure | None:
    """Improvement (%) of each judged metric per level, signed so that up is always better."""
    findings = [f for r in results for f in r.findings]
    levels = list(dict.fromkeys(f.level for f in findings))
    if not levels:
        return None
    series = []
    for metric in dict.fromkeys(f.metric for f in findings):
        by_level = {f.level: _signed_improvement(f) for f in findings if f.metric == metric}
        series.append(BarSeries(metric, tuple(by_level.get(lv) for lv in levels), group=metric))
    return BarFigure(
        key="deltas",
        title=f"Improvement over baseline ({label})",
        category_label="load level",
        value_label="improvement (%), up is better",
        categories=tuple(levels),
        series=tuple(series),
        zero_line=True,
        caption="Signed so that up is better for every metric: throughput gained, latency saved. "
        "The table below gives the raw changes and the verdicts.",
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

"""The tune report page and the comparison report page."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from perfkit.gate import GateOptions, GateResult
from perfkit.gate.compare import VERDICT_ORDER
from perfkit.records import RunRecord, TuneRecord
from perfkit.report import _calibration_figures as CAL
from perfkit.report import _compare as C
from perfkit.report import _figures as F
from perfkit.report import _tune as T
from perfkit.report._page import Banner, Block, Card, Page, PageBuilder, command_line, fmt_value, machine_facts


def _run_labels_for_tune(tune: TuneRecord, runs: list[RunRecord]) -> list[str]:
    by_sha = {t.served_config_sha256: t for t in tune.trials if t.served_config_sha256}
    best = tune.best()
    labels = []
    for i, run in enumerate(runs):
        trial = by_sha.get(str(run.model.served_config_sha256))
        if trial is None:
            labels.append(F.run_label(run, i, runs))
        else:
            tag = (
                " (best)"
                if best is not None and trial.number == best.number
                else " (original)"
                if trial.is_original
                else ""
            )
            labels.append(f"trial {trial.number}{tag}")
    return labels


def tune_page(tune: TuneRecord, runs: list[RunRecord]) -> Page:
    """The tune report: recommendation, trials, Pareto front, importances, config diff, trial runs."""
    pct = T.budget_name(tune)
    page = Page(
        kind="tune",
        title=f"{tune.model}: config tuning within {tune.budget.latency_budget_ms:g} ms {pct}",
        subtitle=f"{len(tune.trials)} trials · objective {tune.objective} · Triton "
        f"{tune.server.get('version', '?')} · {tune.created_utc}",
        data={"tune": tune, "runs": runs},
    )
    page.sentence = T.recommendation(tune)
    best = tune.best()
    orig = T.original_trial(tune)
    page.sentence_bad = best is None
    if tune.status != "ok":
        page.banners.append(Banner("bad", f"The tune run {tune.status}: {tune.error or 'no reason recorded'}"))
    counts = {g: sum(1 for t in tune.trials if T.trial_group(t) == g) for g in T.GROUP_ORDER}
    if best is not None and best.throughput_infer_per_s is not None:
        c = best.confirmation
        if c is not None and c.held:
            # the claim is the confirmed figure, with its interval
            sub = (f"trial {best.number}, confirmed in {c.repeats} runs, a re-measurement within "
                   f"{T.fmt_rate(c.throughput_low)}–{T.fmt_rate(c.throughput_high)} at 95%")  # fmt: skip
            page.cards.append(Card("best throughput", T.fmt_rate(c.throughput_infer_per_s), "infer/s", sub, "good"))
        else:
            page.cards.append(
                Card(
                    "best throughput",
                    T.fmt_rate(best.throughput_infer_per_s),
                    "infer/s",
                    f"trial {best.number}",
                    "good",
                )  # fmt: skip
            )
        if best.latency_us is not None:
            page.cards.append(
                Card(
                    f"{pct} at that load",
                    fmt_value(best.latency_us / 1000),
                    "ms",
                    f"budget {tune.budget.latency_budget_ms:g} ms",
                )
            )
        if orig is not None and orig.throughput_infer_per_s:
            gain = best.throughput_infer_per_s / orig.throughput_infer_per_s
            page.cards.append(
                Card(
                    "gain over original",
                    f"≤ {gain:.1f}×" if orig.rate_is_lower_bound else f"{gain:.1f}×",
                    "",
                    f"original {'≥ ' if orig.rate_is_lower_bound else ''}{T.fmt_rate(orig.throughput_infer_per_s)}"
                    " infer/s",
                    "good" if gain > 1 else "",
                )
            )
    page.cards.append(
        Card(
            "trials",
            str(len(tune.trials)),
            "",
            f"{counts['feasible']} feasible, {counts['over budget']} over budget, {counts['pruned']} pruned, "
            f"{counts['failed']} failed",
            "warn" if counts["failed"] else "",
        )
    )

    b = PageBuilder(page)
    s = b.section("trials", "Trial history", "What each trial reached within the budget, in the order tried.")
    thr, lat = T.trial_history(tune)
    b.figure(s, thr)
    b.figure(s, lat)
    b.table(s, T.trials_table(tune))

    steps = T.steps_table(tune)
    if steps is not None:
        s = b.section("steps", "Pipeline steps", "Where each step's time went, in the original and the best pipeline.")
        b.table(s, steps)

    # A pipeline's or a mix's calibration holds one per model (its own points are none): one section each.
    whole = tune.calibration
    for cal in (whole.steps or (whole,)) if whole is not None else ():
        key, title = (
            ("calibration", "Calibration")
            if cal is whole
            else (f"calibration-{cal.model}", f"Calibration: {cal.model}")
        )
        s = b.section(key, title, CAL.fit_error_sentence(cal))
        b.figure(s, CAL.service_figure(cal), CAL.calibration_table(cal))
        scaling = CAL.scaling_figure(cal)
        if scaling is not None:
            b.figure(s, scaling)

    s = b.section("pareto", "Pareto front", "The trade-off between throughput and latency across trials.")
    front = set(T.pareto_front(tune))
    front_table = T.trials_table(tune)
    front_table = F.Table(
        key="pareto",
        title="Trials on the Pareto front",
        columns=front_table.columns,
        rows=tuple(r for r in front_table.rows if r[0] in front),
    )
    b.figure(s, T.pareto_figure(tune), front_table)

    imp = T.importance_figure(tune)
    if imp is not None:
        s = b.section("importance", "Which parameters mattered")
        b.figure(s, imp, T.importance_table(tune))

    s = b.section("config", "Config change", "The recommended config.pbtxt against the original, line by line.")
    s.blocks.append(
        Block(
            kind="diff",
            title="original → best",
            lines=T.config_diff(tune),
            empty="No recommended config." if not tune.best_config else "The best config is the original.",
        )
    )
    if tune.best_config:
        s.blocks.append(Block(kind="pre", title="Best config.pbtxt", text=tune.best_config))
    s.blocks.append(Block(kind="pre", title="Original config.pbtxt", text=tune.original_config))

    if runs:
        s = b.section("runs", "Trial runs", "Full throughput–latency curves of the trials whose runs were saved.")
        b.figure(s, F.throughput_latency(runs, _run_labels_for_tune(tune, runs)), *(F.levels_table(r) for r in runs))

    s = b.section("about", "About this run")
    s.blocks.append(
        Block(
            kind="facts",
            facts=[
                ("model", tune.model),
                ("budget", f"{pct} ≤ {tune.budget.latency_budget_ms:g} ms"),
                ("objective", tune.objective),
                ("server", " · ".join(f"{k} {v}" for k, v in tune.server.items())),
                ("command", command_line(tune.command)),
                ("perfkit", tune.perfkit_version),
                ("when", tune.created_utc),
                ("status", tune.status + (f": {tune.error}" if tune.error else "")),
            ],
        )
    )
    s.blocks.append(Block(kind="facts", title="Machine", facts=machine_facts(tune.machine)))
    return page


def _side_facts(baseline: list[RunRecord], current: list[RunRecord]) -> F.Table:
    def vals(recs: list[RunRecord], get: Any) -> str:
        return ", ".join(dict.fromkeys(str(get(r)) for r in recs)) or "—"

    fields = (
        ("runs", lambda r: ""),
        ("model", lambda r: r.model.name),
        ("config sha256", lambda r: str(r.model.served_config_sha256)[:16]),
        ("server", lambda r: f"Triton {r.server.version}"),
        ("machine", lambda r: r.machine.hostname or "?"),
        ("perfkit", lambda r: r.perfkit_version),
        ("when", lambda r: r.created_utc),
        ("command", lambda r: command_line(r.command)),
    )
    rows = []
    for name, get in fields:
        if name == "runs":
            rows.append((name, str(len(baseline)), str(len(current))))
        else:
            rows.append((name, vals(baseline, get), vals(current, get)))
    return F.Table(key="sides", title="What is compared", columns=("", "baseline", "current"), rows=tuple(rows))


def comparison_page(
    baseline: list[RunRecord],
    current: list[RunRecord],
    results: Sequence[GateResult] | None = None,
    options: GateOptions | None = None,
) -> Page:
    """The comparison report: the comparison core's verdicts per level and threshold, and overlaid curves.

    results: the gate's results when it already judged these runs (shown as they are); else
    the runs are judged here by the same core with `options` (the gate's defaults when None).
    """
    names = sorted({str(r.model.name) for r in (*baseline, *current)})
    groups = C.group_current(current)
    judged = [("current", list(results))] if results is not None else C.judge_groups(baseline, groups, options)
    page = Page(
        kind="comparison",
        title=f"{', '.join(names)}: baseline vs current",
        subtitle=f"{len(baseline)} baseline run(s) · {len(current)} current run(s)",
        data={"baseline": baseline, "current": current, "results": [r.to_dict() for _, rs in judged for r in rs]},
    )
    findings = [f for _, rs in judged for r in rs for f in r.findings]
    counts = {v: sum(1 for f in findings if f.verdict == v) for v in VERDICT_ORDER}
    page.cards = [
        Card(
            "regressions", str(counts["regression"]), "", "level × threshold", "bad" if counts["regression"] else "good"
        ),
        Card(
            "improvements", str(counts["improvement"]), "", "level × threshold", "good" if counts["improvement"] else ""
        ),
        Card("inconclusive", str(counts["inconclusive"]), "", "past a threshold, not significant"),
        Card(
            "invalid", str(counts["invalid"]), "", "not judged: evidence missing", "warn" if counts["invalid"] else ""
        ),
    ]
    if counts["regression"]:
        page.banners.append(
            Banner("bad", f"{counts['regression']} level × threshold pairs are regressions: the gate fails on them.")
        )
    if not findings:
        page.banners.append(
            Banner("warn", "No load level is present in both baseline and current: nothing to compare.")
        )
    for note in dict.fromkeys(n for _, rs in judged for r in rs for n in (*r.notes, *r.changes)):
        page.banners.append(Banner("info", note))

    b = PageBuilder(page)
    s = b.section("curves", "Throughput vs latency", "Both sides on one figure.")
    b.figure(s, C.overlay_figure([("baseline", baseline), *groups]))
    for i, (label, rs) in enumerate(judged):
        s = b.section(f"deltas-{i + 1}", f"Verdicts: {label}" if len(judged) > 1 else "Verdicts per level")
        fig = C.delta_figure(label, rs)
        if fig is not None:
            b.figure(s, fig)
        b.table(s, C.delta_table(label, rs))
    s = b.section("sides", "What is compared")
    b.table(s, _side_facts(baseline, current))
    return page

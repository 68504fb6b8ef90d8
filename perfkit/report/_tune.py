"""Figure data for tune reports: the recommendation, trial history, Pareto front, importances, config diff."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from perfkit.records import TrialRecord, TuneRecord
from perfkit.report._figure_types import BarFigure, BarSeries, LineFigure, Mark, Series, Table, pct_name

KNOWN_PARAMS = ("max_batch_size", "dynamic_batching", "max_queue_delay_us", "instance_count", "precision")


def fmt_rate(value: float) -> str:
    """1840.3 -> '1,840'; small rates keep a decimal."""
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"


def fmt_ms(value_ms: float) -> str:
    """14.23 -> '14.2 ms'; three significant figures, no exponent."""
    if value_ms >= 100:
        return f"{value_ms:,.0f} ms"
    if value_ms >= 10:
        return f"{value_ms:.1f} ms"
    return f"{value_ms:.2f} ms"


def describe_params(params: dict[str, Any]) -> str:
    """Trial parameters in words: 'max_batch_size 8, dynamic batching with 500 µs queue delay, 2 instances, fp16'."""
    parts = []
    if "max_batch_size" in params:
        parts.append(f"max_batch_size {params['max_batch_size']}")
    if "dynamic_batching" in params:
        if params["dynamic_batching"]:
            delay = params.get("max_queue_delay_us")
            parts.append(f"dynamic batching with {delay:g} µs queue delay" if delay is not None else "dynamic batching")
        else:
            parts.append("no dynamic batching")
    elif "max_queue_delay_us" in params:
        parts.append(f"{params['max_queue_delay_us']:g} µs queue delay")
    if "instance_count" in params:
        n = params["instance_count"]
        parts.append(f"{n} instance{'s' if n != 1 else ''}")
    if "precision" in params:
        parts.append(str(params["precision"]))
    for key, value in params.items():
        if key not in KNOWN_PARAMS:
            parts.append(f"{key} {value}")
    return ", ".join(parts)


def original_trial(tune: TuneRecord) -> TrialRecord | None:
    """The trial that measured the original config, if any (TuneRecord.original)."""
    return tune.original()


def budget_name(tune: TuneRecord) -> str:
    """What the budget bounds, e.g. 'p99' (request latency) or 'TTFT p99' / 'ITL p99' (streamed models)."""
    return tune.budget.label


def recommendation(tune: TuneRecord) -> str:
    """The recommendation in one sentence: config, throughput, latency, gain over the original, budget."""
    pct = budget_name(tune)
    budget = f"{tune.budget.latency_budget_ms:g} ms"
    best = tune.best()
    orig = original_trial(tune)
    if best is None or best.throughput_infer_per_s is None:
        done = sum(1 for t in tune.trials if t.state == "complete")
        why = f" ({tune.error})" if tune.error else ""
        return (
            f"No recommendation: none of {len(tune.trials)} trials ({done} complete) met the {budget} {pct} "
            f"budget{why}."
        )
    lat = f" at {pct} {fmt_ms(best.latency_us / 1000)}" if best.latency_us is not None and not tune.mix else ""
    what = f"trial {best.number} ({describe_params(best.params)})" if best.params else f"trial {best.number}"
    claimed = best.claimed_throughput or best.throughput_infer_per_s
    c = best.confirmation
    if c is not None and not c.held:  # every confirmation failed: the user's own config stands (Objective.best)
        return (
            f"Keep your config: no confirmation held. The search read {fmt_rate(best.throughput_infer_per_s)} "
            f"infer/s{lat} for it once, which its own confirmation did not hold ({c.note or 'not confirmed'})."
        )
    if c is not None and c.held:
        lat = (
            f" (confirmed in {c.repeats} runs, a re-measurement within {fmt_rate(c.throughput_low)}–"
            f"{fmt_rate(c.throughput_high)} at 95%, "
            f"at {c.load.label}, worst {pct} {fmt_ms(c.latency_us / 1000)})"
        )
    sentence = f"Best: {what} gives {fmt_rate(claimed)} infer/s{lat}"
    if best.is_original:
        sentence += ": the original config is already the best found"
    elif orig is not None and orig.throughput_infer_per_s:
        base = orig.claimed_throughput or orig.throughput_infer_per_s
        gain = claimed / base
        if orig.rate_is_lower_bound:
            sentence += (
                f", at most {gain:.1f}× the original config's {fmt_rate(base)} infer/s (the rate it held where it"
                " was predicted; not searched higher, since it could not compete)"
            )
        else:
            sentence += f", {gain:.1f}× the original config's {fmt_rate(base)} infer/s"
        if not orig.feasible:
            sentence += " (which missed the budget)"
    scope = budget if tune.budget.metric == "latency" else f"{budget} {pct}"  # a TTFT/ITL budget says what it bounds
    if tune.mix:
        # a traffic mix: the figure is the whole mix's; each model is held to its own budget
        mix = ",".join(f"{m}:{w}" for m, w in tune.mix)
        per = "; ".join(
            f"{m} {fmt_rate(best.metrics.get(f'{m}.throughput_infer_per_s', 0.0))} infer/s at {pct} "
            f"{fmt_ms(best.metrics.get(f'{m}.latency_us', 0.0) / 1000)} of {b:g} ms"
            for m, b in tune.budget.per_model_ms
        )
        sentence += f", at the traffic mix {mix} with every model within its own budget ({per})."
    else:
        sentence += f", within the {scope} budget."
    if tune.status != "ok":
        sentence += f" The tune run was {tune.status} before it finished."
    return sentence


def trial_group(trial: TrialRecord) -> str:
    """'feasible', 'over budget', 'pruned', 'failed' or 'running'."""
    if trial.state == "failed":
        return "failed"
    if trial.state == "pruned":
        return "pruned"
    if trial.state == "running":
        return "running"
    return "feasible" if trial.feasible else "over budget"


GROUP_ORDER = ("feasible", "over budget", "pruned", "failed", "running")


def trial_history(tune: TuneRecord) -> tuple[LineFigure, LineFigure]:
    """Throughput and latency of each trial, by trial number, grouped by outcome; failed trials at zero."""
    thr_series = []
    lat_series = []
    for group in GROUP_ORDER:
        members = [t for t in tune.trials if trial_group(t) == group]
        if not members:
            continue
        thr = tuple(
            (float(t.number), t.throughput_infer_per_s if t.throughput_infer_per_s is not None else 0.0)
            for t in members
        )
        lat = tuple((float(t.number), t.latency_us / 1000) for t in members if t.latency_us is not None)
        label = "failed (no result)" if group == "failed" else group
        thr_series.append(Series(label, thr, group=group, kind="scatter"))
        if lat:
            lat_series.append(Series(label, lat, group=group, kind="scatter"))
    marks = []
    best = tune.best()
    if best is not None and best.throughput_infer_per_s is not None:
        marks.append(Mark(float(best.number), best.throughput_infer_per_s, "best", group="best"))
    orig = original_trial(tune)
    if orig is not None and orig.throughput_infer_per_s is not None:
        marks.append(Mark(float(orig.number), orig.throughput_infer_per_s, "original", group="original"))
    pct = pct_name(tune.budget.percentile)
    thr_fig = LineFigure(
        key="trial-throughput",
        title="Throughput per trial",
        x_label="trial",
        y_label="throughput within budget (infer/s)",
        series=tuple(thr_series),
        marks=tuple(marks),
        caption="Each trial's best throughput whose latency met the budget.",
    )
    lat_fig = LineFigure(
        key="trial-latency",
        title=f"{pct} latency per trial",
        x_label="trial",
        y_label=f"{pct} latency (ms)",
        series=tuple(lat_series),
        hlines=((tune.budget.latency_budget_ms, f"budget {tune.budget.latency_budget_ms:g} ms"),),
    )
    return thr_fig, lat_fig


def pareto_front(tune: TuneRecord) -> tuple[int, ...]:
    """Trial numbers on the throughput/latency Pareto front (TuneRecord.pareto: feasible trials only)."""
    return tuple(sorted(t.number for t in tune.pareto()))


def pareto_figure(tune: TuneRecord) -> LineFigure:
    """Every measured trial as latency (x) vs throughput (y); the front as a line; the budget as a vertical line."""
    front_ids = set(pareto_front(tune))
    series = []
    for group in GROUP_ORDER:
        pts = tuple(
            (t.latency_us / 1000, t.throughput_infer_per_s)
            for t in tune.trials
            if trial_group(t) == group and t.latency_us is not None and t.throughput_infer_per_s is not None
        )
        if pts:
            series.append(Series(group, pts, group=group, kind="scatter"))
    front = sorted(
        (t.latency_us / 1000, t.throughput_infer_per_s)  # type: ignore[operator]  # only trials with both figures set reach this (filtered below)
        for t in tune.trials
        if t.number in front_ids and t.latency_us is not None and t.throughput_infer_per_s is not None
    )
    if front:
        series.append(Series("Pareto front", tuple(front), group="front", kind="step"))
    marks = [
        Mark(t.latency_us / 1000, t.throughput_infer_per_s, f"#{t.number}", group="label")
        for t in tune.trials
        if t.latency_us is not None and t.throughput_infer_per_s is not None
    ]
    pct = pct_name(tune.budget.percentile)
    return LineFigure(
        key="pareto",
        title="Throughput vs latency of every trial",
        x_label=f"{pct} latency (ms)",
        y_label="throughput (infer/s)",
        series=tuple(series),
        marks=tuple(marks),
        vlines=((tune.budget.latency_budget_ms, f"budget {tune.budget.latency_budget_ms:g} ms"),),
        caption="Up and to the left is better. No trial on the front is beaten on both throughput and latency.",
    )


def importance_figure(tune: TuneRecord) -> BarFigure | None:
    """Parameter importances, largest first; None when the tuner reported none."""
    if not tune.importances:
        return None
    items = sorted(tune.importances.items(), key=lambda kv: kv[1], reverse=True)
    return BarFigure(
        key="importances",
        title="Which parameters mattered",
        category_label="parameter",
        value_label="importance (share of throughput variation explained)",
        categories=tuple(k for k, _ in items),
        series=(BarSeries("importance", tuple(v for _, v in items), group="importance"),),
        horizontal=True,
    )


def importance_table(tune: TuneRecord) -> Table:
    """Parameter importances as a table, largest first (the median over resamples of the trials, or of a
    predicted search's predictions of the whole space, with their 10-90% range where the record keeps it)."""
    items = sorted(tune.importances.items(), key=lambda kv: kv[1], reverse=True)
    if not tune.importance_low:
        return Table(
            key="importances", title="Parameter importances", columns=("parameter", "importance"), rows=tuple(items)
        )
    rows = tuple((k, v, tune.importance_low.get(k, v), tune.importance_high.get(k, v)) for k, v in items)
    columns = ("parameter", "importance (median)", "low (10%)", "high (90%)")
    title = f"Parameter importances over resamples of {tune.importance_over or 'the trials'}"
    return Table(key="importances", title=title, columns=columns, rows=rows)


def confirmed_cell(t: TrialRecord) -> str:
    """A trial's confirmation in one cell: the confirmed figure with its interval, or DEMOTED."""
    c = t.confirmation
    if c is None:
        return ""
    if not c.held:
        return f"DEMOTED: {c.note}"
    step = f", stepped down from {c.searched_load.label}" if c.searched_load is not None else ""
    return (
        f"{fmt_rate(c.throughput_infer_per_s)} ({fmt_rate(c.throughput_low)}–{fmt_rate(c.throughput_high)}) "
        f"at {c.load.label}{step}; worst of {c.repeats} {fmt_ms(c.latency_us / 1000)}"
    )


def trials_table(tune: TuneRecord) -> Table:
    """Every trial: state, parameters, the load reached, throughput, latency, feasibility, reason."""
    best = tune.best()
    best_number = best.number if best else None
    front = set(pareto_front(tune))
    rows = []
    classes = []
    for t in sorted(tune.trials, key=lambda t: t.number):
        tags = [x for x, on in (("best", t.number == best_number), ("original", t.is_original)) if on]
        if t.number in front:
            tags.append("Pareto")
        rows.append(
            (
                t.number,
                ", ".join(tags),
                t.state,
                describe_params(t.params),
                t.load.label if t.load else None,
                t.throughput_infer_per_s,
                None if t.latency_us is None else t.latency_us / 1000,
                "yes" if t.feasible else "no",
                t.fail_reason,
                t.duration_s,
                confirmed_cell(t),
            )
        )
        group = trial_group(t)
        classes.append(
            (
                "",
                "good" if t.number == best_number else "",
                "bad" if group == "failed" else ("warn" if group in ("pruned", "over budget") else ""),
                "",
                "",
                "",
                "",
                "" if t.feasible else "bad",
                "",
                "",
                "" if t.confirmation is None else ("good" if t.confirmation.held else "bad"),
            )
        )
    pct = pct_name(tune.budget.percentile)
    return Table(
        key="trials",
        title="Trials",
        columns=(
            "trial",
            "",
            "state",
            "parameters",
            "load reached",
            "infer/s",
            f"{pct} ms",
            "feasible",
            "reason",
            "duration s",
            "confirmed (a re-measurement within, 95%)",
        ),
        rows=tuple(rows),
        cell_classes=tuple(classes),
    )


@dataclass(frozen=True)
class DiffLine:
    """One line of a unified diff: kind is 'add', 'del', 'hunk', 'meta' or 'same'."""

    kind: str
    text: str


def config_diff(tune: TuneRecord) -> tuple[DiffLine, ...]:
    """Unified diff of original_config -> best_config (empty when there is no best or no change)."""
    if not tune.best_config:
        return ()
    lines = difflib.unified_diff(
        tune.original_config.splitlines(),
        tune.best_config.splitlines(),
        fromfile="original config.pbtxt",
        tofile=f"best config.pbtxt (trial {tune.best_trial})",
        lineterm="",
        n=3,
    )
    out = []
    for line in lines:
        if line.startswith(("---", "+++")):
            kind = "meta"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        else:
            kind = "same"
        out.append(DiffLine(kind, line))
    return tuple(out)


def steps_table(tune: TuneRecord) -> Table | None:
    """A pipeline's steps, original and best side by side: queue and compute time per request and
    the mean batch Triton formed (None for a one-model tune, whose trials hold no step figures)."""
    orig, best = original_trial(tune), tune.best()
    trials = [t for t in (orig, best) if t is not None]
    steps = sorted({k.rpartition(".")[0] for t in trials for k in t.metrics if k.endswith(".compute_us")})
    if not steps:
        return None

    def value(t: TrialRecord | None, step: str, key: str, scale: float) -> float | None:
        v = t.metrics.get(f"{step}.{key}") if t is not None else None
        return None if v is None else v / scale

    rows = tuple(
        (
            step,
            value(orig, step, "queue_us", 1e3),
            value(best, step, "queue_us", 1e3),
            value(orig, step, "compute_us", 1e3),
            value(best, step, "compute_us", 1e3),
            value(orig, step, "batch", 1.0),
            value(best, step, "batch", 1.0),
        )
        for step in steps
    )
    return Table(
        key="steps",
        title="Pipeline steps: original and best",
        columns=(
            "step",
            "queue ms (original)",
            "queue ms (best)",
            "compute ms (original)",
            "compute ms (best)",
            "batch (original)",
            "batch (best)",
        ),  # fmt: skip
        rows=rows,
    )

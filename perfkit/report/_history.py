"""The history page: each metric's series over the stored runs, with intervals and change points.

Figures are data first (history_figure, changes_table: checked by tests), drawn second.
"""

from __future__ import annotations

from collections.abc import Sequence

from perfkit.history import ChangePoint, Series
from perfkit.report._figure_types import LineFigure, Table
from perfkit.report._figure_types import Series as Line
from perfkit.report._page import Banner, Card, Page, PageBuilder


def _key(s: Series) -> str:
    return "history-" + "-".join(part.replace(" ", "_").replace("/", "_") for part in (s.model, s.level, s.metric))


def history_figure(series: Series, changes: Sequence[ChangePoint]) -> LineFigure:
    """One series over run number: the figure, its ~95% interval as dashed bounds, a line at each change."""
    xs = range(1, len(series.points) + 1)
    own = [c for c in changes if (c.model, c.level, c.metric) == (series.model, series.level, series.metric)]
    first, last = series.points[0], series.points[-1]
    return LineFigure(
        key=_key(series),
        title=f"{series.model} · {series.level} · {series.metric}",
        x_label="run (oldest first)",
        y_label=f"{series.metric} ({series.unit})",
        series=(
            Line(series.metric, tuple((x, p.value) for x, p in zip(xs, series.points)), group=series.metric),
            Line("~95% interval", tuple((x, p.low) for x, p in zip(xs, series.points)), group="interval", variant="b"),
            Line("", tuple((x, p.high) for x, p in zip(xs, series.points)), group="interval", variant="b"),
        ),
        vlines=tuple((c.index + 0.5, f"{c.direction} {c.change_pct:+.1f}%") for c in own),
        caption=(
            f"{len(series.points)} runs from {first.created_utc} to {last.created_utc}. Dashed: each run's ~95% "
            f"interval (its windows and {series.job_noise_pct:g}% job-to-job noise)."
        ),
    )


def changes_table(changes: Sequence[ChangePoint]) -> Table:
    """Every change point: where, the medians before and after, the size and significance."""
    rows = tuple(
        (c.model, c.level, c.metric, c.direction, c.index + 1, c.run_id, c.created_utc, c.commit[:10] or "—",
         c.before, c.after, c.change_pct, c.p_value)
        for c in changes
    )  # fmt: skip
    classes = tuple(tuple("bad" if c.direction == "regression" and i == 3 else "" for i in range(12)) for c in changes)
    return Table(
        "history-changes",
        "Change points",
        ("model", "level", "metric", "direction", "run #", "run", "created", "commit", "before", "after", "change %",
         "p"),
        rows,
        note="E-divisive means (Matteson & James 2014) with a permutation test; before/after are segment medians.",
        cell_classes=classes,
    )  # fmt: skip


def history_page(series: Sequence[Series], changes: Sequence[ChangePoint]) -> Page:
    """The history report of some series and their change points."""
    models = sorted({s.model for s in series})
    runs = max((len(s.points) for s in series), default=0)
    page = Page(
        kind="history",
        title=f"{', '.join(models)}: performance history",
        subtitle=f"{runs} runs · {len(series)} series · {len(changes)} change points",
        data={"series": list(series), "changes": list(changes)},
    )
    regressions = [c for c in changes if c.direction == "regression"]
    page.cards = [
        Card("series", str(len(series))),
        Card("runs", str(runs)),
        Card("regressions", str(len(regressions)), cls="bad" if regressions else ""),
        Card("improvements", str(len(changes) - len(regressions))),
    ]
    for c in regressions:
        page.banners.append(Banner("bad", c.line()))
    b = PageBuilder(page)
    s = b.section("changes", "Change points", "Where a metric moved for good, and by how much.")
    b.table(s, changes_table(changes))
    for model in models:
        s = b.section(f"history-{model}", f"{model}: history", "One figure per load level and metric.")
        for one in series:
            if one.model == model:
                b.figure(s, history_figure(one, changes))
    return page

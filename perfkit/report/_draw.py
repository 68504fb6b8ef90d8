"""Drawing: figure data -> inline SVG text with matplotlib (Agg-free SVG backend, no pyplot state)."""

from __future__ import annotations

import io
import re
from typing import Any

import matplotlib

matplotlib.use("Agg")  # never a GUI backend, even when a display is around

from matplotlib import rc_context  # noqa: E402
from matplotlib.figure import Figure as MplFigure  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from perfkit.report._figure_types import BarFigure, Figure, LineFigure  # noqa: E402

PALETTE = (
    "#2563eb",
    "#dc2626",
    "#059669",
    "#d97706",
    "#7c3aed",
    "#0891b2",
    "#db2777",
    "#65a30d",
    "#475569",
    "#ea580c",
)
# Fixed colours where a group means the same everywhere.
NAMED = {
    "feasible": "#059669",
    "over budget": "#d97706",
    "pruned": "#94a3b8",
    "failed": "#dc2626",
    "running": "#2563eb",
    "front": "#1e293b",
    "best": "#059669",
    "original": "#475569",
    "queue": "#f59e0b",
    "compute input": "#60a5fa",
    "compute infer": "#2563eb",
    "compute output": "#93c5fd",
    "p50": "#2563eb",
    "p99": "#dc2626",
    "baseline": "#64748b",
    "current": "#2563eb",
    "throughput": "#059669",
    "p50 latency": "#60a5fa",
    "p99 latency": "#7c3aed",
    "importance": "#2563eb",
}
DASHES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D")

RC: dict[str, Any] = {
    "svg.fonttype": "none",  # text stays text: smaller, selectable, rendered by the browser
    "svg.hashsalt": "perfkit",  # deterministic ids
    "font.family": "sans-serif",
    "font.size": 9.5,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.edgecolor": "#94a3b8",
    "axes.labelcolor": "#334155",
    "xtick.color": "#475569",
    "ytick.color": "#475569",
    "axes.grid": True,
    "grid.color": "#e2e8f0",
    "grid.linewidth": 0.8,
    "legend.frameon": False,
    "legend.fontsize": 8.5,
}


class _Colors:
    def __init__(self) -> None:
        self.assigned: dict[str, str] = {}

    def __call__(self, group: str) -> str:
        if group in NAMED:
            return NAMED[group]
        if group not in self.assigned:
            self.assigned[group] = PALETTE[len(self.assigned) % len(PALETTE)]
        return self.assigned[group]


def _index(seen: dict[str, int], key: str) -> int:
    return seen.setdefault(key, len(seen))


def _draw_line(fig: LineFigure, ax: object) -> None:
    from matplotlib.axes import Axes

    assert isinstance(ax, Axes)
    colors = _Colors()
    variants: dict[str, int] = {}
    for s in fig.series:
        if not s.points:
            continue
        xs = [p[0] for p in s.points]
        ys = [p[1] for p in s.points]
        color = colors(s.group or s.label)
        v = _index(variants, s.variant)
        if s.kind == "scatter":
            marker = "x" if s.group == "failed" else MARKERS[v % len(MARKERS)]
            ax.scatter(xs, ys, label=s.label, color=color, s=28, marker=marker, zorder=3)
        elif s.kind == "step":
            ax.step(xs, ys, where="post", label=s.label, color=color, linewidth=1.4)
        else:
            ax.plot(
                xs,
                ys,
                label=s.label,
                color=color,
                linestyle=DASHES[v % len(DASHES)],
                marker=MARKERS[v % len(MARKERS)],
                markersize=3.5,
                linewidth=1.6,
            )
    for m in fig.marks:
        if m.group == "label":
            ax.annotate(m.label, (m.x, m.y), xytext=(4, 3), textcoords="offset points", fontsize=7.5, color="#475569")
        elif m.group in ("best", "original"):
            ax.scatter([m.x], [m.y], s=140, facecolors="none", edgecolors=NAMED[m.group], linewidths=1.6, zorder=4)
            ax.annotate(
                m.label, (m.x, m.y), xytext=(7, -12), textcoords="offset points", fontsize=8, color=NAMED[m.group]
            )
        else:
            ax.scatter([m.x], [m.y], s=12, color=colors(m.group), edgecolors="white", linewidths=0.5, zorder=4)
    for y, label in fig.hlines:
        ax.axhline(y, color="#dc2626" if "budget" in label else "#94a3b8", linestyle="--", linewidth=1)
        ax.annotate(label, (0.995, y), xycoords=("axes fraction", "data"), ha="right", va="bottom", fontsize=8)
    for x, label in fig.vlines:
        ax.axvline(x, color="#dc2626" if "budget" in label else "#cbd5e1", linestyle="--", linewidth=1)
        ax.annotate(
            label,
            (x, 0.99),
            xycoords=("data", "axes fraction"),
            rotation=90,
            ha="right",
            va="top",
            fontsize=7.5,
            color="#64748b",
        )
    if fig.x_log:
        ax.set_xscale("log")
        _plain_log_ticks(ax.xaxis)
    if fig.y_log:
        ax.set_yscale("log")
        _plain_log_ticks(ax.yaxis)
    if not fig.x_log and (fig.key.startswith("throughput-latency") or fig.key in ("compare-curve", "pareto")):
        ax.set_xlim(left=0)
    if not fig.y_log and fig.key not in ("cdf-service", "cdf-corrected"):
        ax.set_ylim(bottom=0)
    if fig.key.startswith("trial-"):
        ax.xaxis.get_major_locator().set_params(integer=True)  # type: ignore[call-arg]  # MaxNLocator takes integer=; the stub types Locator.set_params without it


def _plain_log_ticks(axis: Any) -> None:
    # 1, 2, 5, 10, 20, 50 ms reads better than 10^1, 10^2.
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def _draw_bars(fig: BarFigure, ax: object) -> None:
    from matplotlib.axes import Axes

    assert isinstance(ax, Axes)
    colors = _Colors()
    n_cat = len(fig.categories)
    positions: list[float] = [float(p) for p in range(n_cat)]
    width = 0.75 if fig.stacked or len(fig.series) == 1 else 0.8 / len(fig.series)
    bottom = [0.0] * n_cat
    for i, s in enumerate(fig.series):
        vals = [v if v is not None else 0.0 for v in s.values]
        color = colors(s.group or s.label)
        if fig.stacked:
            pos = positions
            base = list(bottom)
            bottom = [b + v for b, v in zip(bottom, vals)]
        else:
            offset = (i - (len(fig.series) - 1) / 2) * width if len(fig.series) > 1 else 0.0
            pos = [p + offset for p in positions]
            base = [0.0] * n_cat
        if fig.horizontal:
            ax.barh(pos, vals, height=width, left=base, label=s.label, color=color)
        else:
            ax.bar(pos, vals, width=width, bottom=base, label=s.label, color=color)
    if fig.horizontal:
        ax.set_yticks(positions, fig.categories)
        ax.invert_yaxis()
        ax.grid(axis="y", visible=False)
    else:
        rotate = n_cat > 5 or max((len(c) for c in fig.categories), default=0) > 14
        ax.set_xticks(positions, fig.categories, rotation=30 if rotate else 0, ha="right" if rotate else "center")
        ax.grid(axis="x", visible=False)
    if fig.zero_line:
        ax.axhline(0, color="#334155", linewidth=0.8)


def _prefix_ids(svg: str, prefix: str) -> str:
    # Several SVGs inline in one page share one id namespace: make each figure's ids unique.
    ids = set(re.findall(r'\bid="([^"]+)"', svg))
    if not ids:
        return svg

    def sub(m: re.Match[str]) -> str:
        return m.group(1) + prefix + m.group(2) if m.group(2) in ids else m.group(0)

    return re.sub(r'(\bid="|href="#|url\(#)([^")]+)', sub, svg)


def render_svg(fig: Figure, id_prefix: str = "", width_in: float = 10.0, height_in: float = 3.7) -> str:
    """The figure as an inline <svg> element (no XML prolog; scales to its container); ids get id_prefix."""
    with rc_context(RC):  # type: ignore[arg-type]  # RC is a plain dict of rc keys; the stub asks for its own mapping type
        mfig = MplFigure(figsize=(width_in, height_in), layout="constrained")
        ax = mfig.add_subplot()
        if isinstance(fig, LineFigure):
            _draw_line(fig, ax)
            ax.set_xlabel(fig.x_label)
            ax.set_ylabel(fig.y_label)
        else:
            _draw_bars(fig, ax)
            ax.set_xlabel(fig.value_label if fig.horizontal else fig.category_label)
            ax.set_ylabel(fig.category_label if fig.horizontal else fig.value_label)
        handles, _ = ax.get_legend_handles_labels()
        if handles and not (isinstance(fig, BarFigure) and len(fig.series) == 1):
            ncol = 1 if len(handles) <= 8 else 2
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), ncol=ncol)
        buf = io.StringIO()
        mfig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    svg = buf.getvalue()
    svg = svg[svg.index("<svg") :]
    # Responsive: keep the viewBox, drop fixed width/height.
    svg = re.sub(r'<svg([^>]*?) width="[^"]*" height="[^"]*"', r'<svg\1 class="fig"', svg, count=1)
    return _prefix_ids(svg, id_prefix or f"{fig.key}-")

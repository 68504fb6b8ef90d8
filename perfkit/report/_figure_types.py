"""Figure data types: what a figure is, as plain frozen data (drawn by _draw, checked by tests)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True)
class Series:
    """One line (or set of points) of a figure; `group` picks its colour, `variant` its line style."""

    label: str
    points: tuple[tuple[float, float], ...]
    group: str = ""
    variant: str = ""
    kind: Literal["line", "step", "scatter"] = "line"


@dataclass(frozen=True)
class Mark:
    """A labelled point (e.g. a percentile on a CDF, a highlighted trial)."""

    x: float
    y: float
    label: str
    group: str = ""


@dataclass(frozen=True)
class LineFigure:
    """An x-y figure: lines, steps or scatter points, with optional marks and reference lines."""

    key: str
    title: str
    x_label: str
    y_label: str
    series: tuple[Series, ...]
    marks: tuple[Mark, ...] = ()
    hlines: tuple[tuple[float, str], ...] = ()
    vlines: tuple[tuple[float, str], ...] = ()
    x_log: bool = False
    y_log: bool = False
    caption: str = ""


@dataclass(frozen=True)
class BarSeries:
    """One bar per category (None: no bar)."""

    label: str
    values: tuple[float | None, ...]
    group: str = ""


@dataclass(frozen=True)
class BarFigure:
    """Bars over categories, grouped side by side or stacked; horizontal for long labels."""

    key: str
    title: str
    category_label: str
    value_label: str
    categories: tuple[str, ...]
    series: tuple[BarSeries, ...]
    stacked: bool = False
    horizontal: bool = False
    zero_line: bool = False
    caption: str = ""


Figure = LineFigure | BarFigure


@dataclass(frozen=True)
class Table:
    """The numbers behind a figure (or a section): raw values; the page formats them."""

    key: str
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    note: str = ""
    cell_classes: tuple[tuple[str, ...], ...] = field(default=())


def us_to_ms(value_us: float | None) -> float | None:
    """Microseconds to milliseconds (None stays None)."""
    return None if value_us is None else value_us / 1000.0


def pct_name(pct: float) -> str:
    """99.0 -> 'p99', 99.9 -> 'p99.9'."""
    return f"p{pct:g}"

"""The page model (sections of blocks) and its rendering to one self-contained HTML file."""

from __future__ import annotations

import datetime as _dt
import json
import math
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from perfkit import __version__
from perfkit.errors import InputError
from perfkit.records import Machine, to_dict
from perfkit.report._draw import render_svg
from perfkit.report._figure_types import Figure, Table
from perfkit.report._template import CSS, TABLE_MACRO, TEMPLATE


@dataclass
class Block:
    """One item of a section: a figure (with its tables), a table, facts, a diff, preformatted or plain text."""

    kind: str
    title: str = ""
    key: str = ""
    svg: str = ""
    caption: str = ""
    tables: list[FmtTable] = field(default_factory=list)
    table: FmtTable | None = None
    collapsed: bool = False
    facts: list[tuple[str, str]] = field(default_factory=list)
    text: str = ""
    cls: str = ""
    lines: tuple[Any, ...] = ()
    empty: str = ""
    open: bool = False


@dataclass
class Section:
    id: str
    title: str
    intro: str = ""
    blocks: list[Block] = field(default_factory=list)


@dataclass
class Card:
    label: str
    value: str
    unit: str = ""
    hint: str = ""
    cls: str = ""


@dataclass
class Banner:
    cls: str  # 'bad', 'warn' or 'info'
    text: str


@dataclass
class Page:
    kind: str
    title: str
    subtitle: str
    sections: list[Section] = field(default_factory=list)
    cards: list[Card] = field(default_factory=list)
    banners: list[Banner] = field(default_factory=list)
    sentence: str = ""
    sentence_bad: bool = False
    data: Any = None
    perfkit_version: str = __version__
    generated_utc: str = ""
    data_json: str = ""


@dataclass(frozen=True)
class FmtTable:
    """A Table with every cell formatted for the page and a CSS class per cell."""

    key: str
    title: str
    columns: tuple[str, ...]
    head_classes: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    classes: tuple[tuple[str, ...], ...]
    note: str


def fmt_value(value: Any) -> str:
    """A table cell: thousands separators, ~4 significant figures, '—' for missing."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        a = abs(value)
        if a == 0:
            return "0"
        if a >= 1000:
            return f"{value:,.0f}"
        if a >= 100:
            return f"{value:.1f}"
        if a >= 10:
            return f"{value:.2f}"
        if a >= 0.01:
            return f"{value:.3f}"
        return f"{value:.2e}"
    return str(value)


def format_table(t: Table) -> FmtTable:
    """Format a Table's cells; text columns (any non-numeric cell) align left."""
    n = len(t.columns)
    text_cols = {
        i
        for i in range(n)
        if any(isinstance(r[i], str) and r[i] not in ("", "yes", "no", "NO") for r in t.rows) or i == 0
    }
    head = tuple("text" if i in text_cols else "" for i in range(n))
    rows = tuple(tuple(fmt_value(v) for v in r) for r in t.rows)
    classes = []
    for ri in range(len(t.rows)):
        given = t.cell_classes[ri] if ri < len(t.cell_classes) else ()
        classes.append(tuple(" ".join(c for c in (head[i], given[i] if i < len(given) else "") if c) for i in range(n)))
    return FmtTable(t.key, t.title, t.columns, head, rows, tuple(classes), t.note)


class PageBuilder:
    """Collects sections and draws figures with page-unique SVG ids."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self._n = 0

    def section(self, id_: str, title: str, intro: str = "") -> Section:
        s = Section(id_, title, intro)
        self.page.sections.append(s)
        return s

    def figure(self, section: Section, fig: Figure, *tables: Table) -> None:
        self._n += 1
        section.blocks.append(
            Block(
                kind="figure",
                title=fig.title,
                key=fig.key,
                svg=render_svg(fig, id_prefix=f"f{self._n}-"),
                caption=fig.caption,
                tables=[format_table(t) for t in tables],
            )
        )

    @staticmethod
    def table(section: Section, t: Table, collapsed: bool = False) -> None:
        section.blocks.append(Block(kind="table", table=format_table(t), collapsed=collapsed))


def command_line(command: tuple[str, ...] | list[str]) -> str:
    """The command as a shell would take it."""
    return shlex.join(command) if command else "—"


def machine_facts(machine: Machine | dict[str, Any]) -> list[tuple[str, str]]:
    """Machine description as (key, value) pairs (unknown fields left out); bytes shown in GiB."""
    out = []
    items = machine.items() if isinstance(machine, dict) else to_dict(machine).items()
    for k, v in items:
        if v is None or v == "":
            continue
        if k.endswith("_bytes") and isinstance(v, (int, float)):
            out.append((k.removesuffix("_bytes").replace("_", " "), f"{v / 2**30:,.1f} GiB"))
        elif isinstance(v, (list, tuple)):
            out.append((k.replace("_", " "), ", ".join(map(str, v)) or "—"))
        else:
            out.append((k.replace("_", " "), str(v)))
    return out


def _json_for_script(data: Any) -> str:
    # Inside <script> only '</' can end the element early; also keep the page ASCII-safe for U+2028/9.
    text = json.dumps(data, separators=(",", ":"))
    return text.replace("</", "<\\/").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def render(page: Page) -> str:
    """The page as HTML text."""
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    template = env.from_string(TABLE_MACRO + TEMPLATE)
    page.generated_utc = page.generated_utc or _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    page.data_json = _json_for_script(to_dict(page.data))
    return template.render(page=page, css=CSS)


def write(page: Page, path: Path | str) -> Path:
    """Render and write atomically; raises InputError when the destination cannot be written."""
    path = Path(path)
    html = render(page)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(html, encoding="utf-8")
        tmp.replace(path)
    except OSError as err:
        raise InputError(f"cannot write report {path}: {err.strerror or err}") from None
    return path

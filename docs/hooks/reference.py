"""MkDocs hook: the reference pages' tables are generated from the code at build time.

A page holds a marker such as ``<!-- generated: pa-flags -->``; the build replaces it with the
table rendered from the code it documents, so the site cannot disagree with the program:

- ``pa-flags``: perf_analyzer's flags and what perfkit does with each (``perfkit/cli/_pa_flags.py``);
- ``exit-codes``: the process exit codes (``perfkit/errors.py``'s ``ExitCode``, with the comment
  on each member) and the code each becomes under perf_analyzer's codes;
- ``run-record`` / ``tune-record``: the run and tune record schemas, one table per dataclass
  (``perfkit.records``: fields, types, defaults and the comment beside each field).

The command reference is mkdocs-click's (a ``::: mkdocs-click`` block in reference/cli.md); this
hook only blanks its rendering of "no default".

Registered in ``mkdocs.yml`` under ``hooks:``. ``tests/unit/cli/test_docs_reference.py`` renders every
marker the same way.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import io
import re
import tokenize
import typing
from typing import Any

MARKER = re.compile(r"<!-- generated: ([a-z-]+) -->")


def render_pa_flags() -> str:
    """perf_analyzer's flags and perfkit's handling of each, from the flag registry."""
    from perfkit.cli._pa_flags import render_markdown

    return render_markdown()


def _member_comments(cls: type) -> dict[str, str]:
    """The comment on the line of each ``NAME = ...`` or ``NAME: ...`` in a class body (and any
    comment lines directly above it), by name."""
    source = inspect.getsource(cls)
    comments: dict[str, str] = {}
    above: list[str] = []
    lines = source.splitlines()
    line_comment: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            line_comment[tok.start[0]] = tok.string.lstrip("#").strip()
    for no, line in enumerate(lines, start=1):
        stripped = line.strip()
        if stripped.startswith("#"):
            above.append(line_comment.get(no, ""))
            continue
        m = re.match(r"^    (\w+)\s*[:=]", line)
        if m:
            text = line_comment.get(no, "")
            comments[m.group(1)] = " ".join(x for x in ([*above, text] if not text else [text]) if x)
        if stripped and not stripped.startswith("#"):
            above = []
    return comments


def render_exit_codes() -> str:
    """Exit codes: value, name, meaning (the comment on each ExitCode member) and perf_analyzer's code."""
    from perfkit.cli._pa_compat import to_pa_exit_code
    from perfkit.errors import ExitCode

    notes = _member_comments(ExitCode)
    lines = [
        "| code | name | meaning | with `PERFKIT_EXIT_CODES=perf_analyzer` |",
        "|---:|---|---|---:|",
    ]
    for code in ExitCode:
        lines.append(f"| {int(code)} | `{code.name}` | {notes.get(code.name, '')} | {to_pa_exit_code(int(code))} |")
    return "\n".join(lines)


def _type_name(tp: Any) -> str:
    text = tp if isinstance(tp, str) else getattr(tp, "__name__", None) or repr(tp)
    return str(text).replace("typing.", "").replace("|", "\\|")


def _default(f: dataclasses.Field[Any]) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default.value if isinstance(f.default, enum.Enum) else f.default
        return f"`{value!r}`"
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]  # a field's factory is a callable
        return f"`{f.default_factory()!r}`"  # type: ignore[misc]  # as above
    return "required"


def _nested_dataclasses(cls: type) -> list[type]:
    """The dataclasses a dataclass's fields hold (through tuples, optionals and dicts), in field order."""
    hints = typing.get_type_hints(cls)
    found: list[type] = []

    def walk(tp: Any) -> None:
        if dataclasses.is_dataclass(tp) and isinstance(tp, type):
            found.append(tp)
        for arg in typing.get_args(tp):
            walk(arg)

    for f in dataclasses.fields(cls):
        walk(hints.get(f.name))
    return found


def render_record(root: type) -> str:
    """One table per dataclass reachable from ``root``: field, type, default and its comment."""
    out: list[str] = []
    seen: set[type] = set()
    queue = [root]
    while queue:
        cls = queue.pop(0)
        if cls in seen:
            continue
        seen.add(cls)
        doc = " ".join((inspect.getdoc(cls) or "").split("\n\n")[0].split())
        notes = _member_comments(cls)
        out += [f"### `{cls.__name__}`", "", doc, "", "| field | type | default | note |", "|---|---|---|---|"]
        for f in dataclasses.fields(cls):
            out.append(f"| `{f.name}` | `{_type_name(f.type)}` | {_default(f)} | {notes.get(f.name, '')} |")
        out.append("")
        queue += [c for c in _nested_dataclasses(cls) if c not in seen]
    return "\n".join(out)


def render(name: str) -> str:
    """The generated text for a marker name; KeyError for an unknown one."""
    from perfkit import records

    generators = {
        "pa-flags": render_pa_flags,
        "exit-codes": render_exit_codes,
        "run-record": lambda: render_record(records.RunRecord),
        "tune-record": lambda: render_record(records.TuneRecord),
        "run-schema-version": lambda: f"`{records.RUN_SCHEMA}` version {records.RUN_SCHEMA_VERSION}",
        "tune-schema-version": lambda: f"`{records.TUNE_SCHEMA}` version {records.TUNE_SCHEMA_VERSION}",
    }
    return generators[name]()


def expand(markdown: str) -> str:
    """The page with every ``<!-- generated: NAME -->`` marker replaced by its generated text."""
    return MARKER.sub(lambda m: render(m.group(1)), markdown)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs event: expand the markers of every page."""
    return expand(markdown)


def on_page_content(html: str, **_: Any) -> str:
    """MkDocs event: an option without a default shows an empty cell, not click's internal marker.

    (click 8.2+ marks "no default" with a sentinel object that mkdocs-click prints as is.)
    """
    return html.replace("<td><code>Sentinel.UNSET</code></td>", "<td></td>")

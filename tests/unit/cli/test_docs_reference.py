"""The documentation's generated reference: every marker renders from the code, and the README
stays a short front door with the links a first-time reader needs."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
from pathlib import Path
from types import ModuleType

from perfkit.cli._pa_flags import PA_FLAGS, render_markdown
from perfkit.errors import ExitCode
from perfkit.records import RUN_SCHEMA_VERSION, LatencySummary, LevelResult, RunRecord, TrialRecord, TuneRecord

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs"


def _hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_reference_hook", DOCS / "hooks" / "reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "hooks" not in p.parts)


def test_every_marker_of_every_page_renders() -> None:
    hook = _hook()
    seen = set()
    for page in _pages():
        text = page.read_text()
        seen |= set(hook.MARKER.findall(text))
        expanded = hook.expand(text)
        assert not hook.MARKER.search(expanded), f"{page}: a marker was left unexpanded"
    assert {"pa-flags", "exit-codes", "run-record", "tune-record"} <= seen


def test_the_flag_page_is_the_code_table() -> None:
    page = (DOCS / "reference" / "perf-analyzer-flags.md").read_text()
    assert "<!-- generated: pa-flags -->" in page
    expanded = _hook().expand(page)
    assert render_markdown() in expanded
    for flag in PA_FLAGS:
        assert f"`{flag.spellings[0]}`" in expanded


def test_exit_codes_table_has_every_code_with_its_meaning() -> None:
    table = _hook().render("exit-codes")
    rows = {int(m.group(1)): m.group(2) for m in re.finditer(r"^\| (\d+) \| `\w+` \| ([^|]*) \|", table, re.M)}
    assert set(rows) == {int(c) for c in ExitCode}
    assert all(meaning.strip() for meaning in rows.values()), rows
    assert "| 130 | `INTERRUPTED` |" in table and "| 99 |" in table  # perf_analyzer's code for errors


def test_record_schema_lists_every_field_and_the_version() -> None:
    hook = _hook()
    run = hook.render("run-record")
    for cls in (RunRecord, LevelResult, LatencySummary):
        assert f"### `{cls.__name__}`" in run
        for f in dataclasses.fields(cls):
            assert f"| `{f.name}` |" in run, f"{cls.__name__}.{f.name} missing from the schema page"
    assert "HdrHistogram compressed base64" in run  # the comment beside LatencySummary.histogram
    tune = hook.render("tune-record")
    for cls in (TuneRecord, TrialRecord):
        for f in dataclasses.fields(cls):
            assert f"| `{f.name}` |" in tune
    assert hook.render("run-schema-version") == f"`perfkit.run` version {RUN_SCHEMA_VERSION}"


def test_readme_is_short_and_links_into_the_site() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    links = set(re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme))
    for target in ("docs/guides/tuning.md", "docs/reference/perf-analyzer-flags.md", "docs/benchmarks.md"):
        assert target in links, f"README does not link {target}"
    for link in links:
        if not link.startswith(("http://", "https://")):
            assert (ROOT / link).exists(), f"README links {link}, which does not exist"

"""The gate's outputs: a terminal table, JUnit XML, GitHub step-summary Markdown, JSON."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from xml.etree import ElementTree as ET

from perfkit.errors import ExitCode
from perfkit.gate.compare import EXIT_OF, VERDICT_ORDER, Finding, GateFailed, GateResult

_MARK = {"pass": "ok", "improvement": "better", "regression": "REGRESSION", "inconclusive": "inconclusive"}
_EMOJI = {"pass": "✅", "improvement": "🚀", "regression": "❌", "inconclusive": "❔", "invalid": "⚠️"}


def fmt_value(f: Finding, value: float | None) -> str:
    if value is None:
        return "-"
    if f.unit == "us":
        return f"{value / 1000.0:.3g} ms" if value < 100_000 else f"{value / 1000.0:.0f} ms"
    return f"{value:.4g}/s" if value < 10_000 else f"{value:.0f}/s"


def _fmt_delta(f: Finding) -> str:
    return "-" if f.delta_pct is None else f"{f.delta_pct:+.1f}%"


def _fmt_ci(f: Finding) -> str:
    return "-" if f.ci_pct is None else f"[{f.ci_pct[0]:+.1f}, {f.ci_pct[1]:+.1f}]%"


def _fmt_conf(f: Finding) -> str:
    return "-" if f.confidence is None else f"{f.confidence:.1%}"


def _metric_name(f: Finding) -> str:
    return f.metric if f.latency_kind is None else f"{f.metric} ({f.latency_kind})"


def _kinds_text(results: Sequence[GateResult]) -> str:
    kinds = {f.latency_kind for r in results for f in r.findings if f.latency_kind}
    if not kinds:
        return ""
    parts = []
    if "corrected" in kinds:
        parts.append("corrected = from when each request was due (open loop, coordinated omission corrected)")
    if "service" in kinds:
        parts.append("service = from when each request was sent")
    return "latency: " + "; ".join(parts)


def overall_verdict(results: Sequence[GateResult]) -> str:
    """The worst verdict over several results (one per model)."""
    present = {r.verdict for r in results} or {"invalid"}
    return next(v for v in VERDICT_ORDER if v in present)


def gate_failure(results: Sequence[GateResult]) -> GateFailed | None:
    """The error a gate that did not pass exits with (10/11/12, its findings counted), or None on pass/improvement."""
    verdict = overall_verdict(results)
    code = EXIT_OF[verdict]
    if code == ExitCode.OK:
        return None
    counts: dict[str, int] = {}
    for r in results:
        for f in r.findings:
            if f.verdict not in ("pass", "improvement"):
                counts[f.verdict] = counts.get(f.verdict, 0) + 1
    detail = ", ".join(f"{n} {v}" for v, n in counts.items()) or "no comparable levels"
    return GateFailed(verdict.upper(), code, f"{detail}; exit {int(code)}")


def render_table(results: Sequence[GateResult], confidence: float = 0.95) -> str:
    """Every finding of every result as a plain-text table, then the reasons of the non-passing ones."""
    lines: list[str] = []
    for r in results:
        lines.append(f"perfkit gate: {r.model}: {r.current_label} vs {r.baseline_label}: {r.verdict.upper()}")
        lines.append(f"  comparison: {r.strength}")
        for change in r.changes:
            lines.append(f"  changed: {change}")
        for note in r.notes:
            lines.append(f"  note: {note}")
        header = ("level", "metric", "baseline", "current", "change", f"{confidence:.0%} CI", "conf.", "verdict")
        rows = [
            (
                f.level,
                _metric_name(f),
                fmt_value(f, f.baseline),
                fmt_value(f, f.current),
                _fmt_delta(f),
                _fmt_ci(f),
                _fmt_conf(f),
                _MARK.get(f.verdict, f.verdict.upper()),
            )
            for f in r.findings
        ]
        widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
        for row in (header, *rows):
            lines.append("  " + "  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip())
        for f in r.findings:
            if f.explained:
                lines.append(f"  - {f.level} {f.metric}: {f.verdict}: {f.reason}")
    kinds = _kinds_text(results)
    if kinds:
        lines.append(kinds)
    return "\n".join(lines)


def write_junit(results: Sequence[GateResult], path: Path) -> Path:
    """JUnit XML: a test suite per model, a test case per (level, metric); failure = regression,
    error = invalid, skipped = inconclusive."""
    suites = ET.Element("testsuites", name="perfkit gate")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for r in results:
        counts = {
            "tests": len(r.findings),
            "failures": sum(f.verdict == "regression" for f in r.findings),
            "errors": sum(f.verdict == "invalid" for f in r.findings),
            "skipped": sum(f.verdict == "inconclusive" for f in r.findings),
        }
        for k, v in counts.items():
            totals[k] += v
        attrs = {"name": f"perfkit gate {r.model}"} | {k: str(v) for k, v in counts.items()}
        suite = ET.SubElement(suites, "testsuite", attrs)
        props = ET.SubElement(suite, "properties")
        for name, value in (("baseline", r.baseline_label), ("current", r.current_label), ("comparison", r.strength)):
            ET.SubElement(props, "property", name=name, value=value)
        for i, change in enumerate(r.changes):
            ET.SubElement(props, "property", name=f"changed.{i}", value=change)
        for f in r.findings:
            case = ET.SubElement(
                suite, "testcase", classname=f"perfkit.gate.{r.model}", name=f"{f.level}: {_metric_name(f)}", time="0"
            )
            detail = (
                f"baseline {fmt_value(f, f.baseline)}, current {fmt_value(f, f.current)}, change {_fmt_delta(f)}, "
                f"CI {_fmt_ci(f)}, confidence {_fmt_conf(f)}, threshold {f.threshold}: {f.reason}"
            )
            tag = {"regression": "failure", "invalid": "error", "inconclusive": "skipped"}.get(f.verdict)
            if tag:
                el = ET.SubElement(case, tag, message=f"{f.verdict}: {f.reason}", type=f.verdict)
                if tag != "skipped":
                    el.text = detail
            ET.SubElement(case, "system-out").text = detail
    for k, v in totals.items():
        suites.set(k, str(v))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(suites).write(path, encoding="utf-8", xml_declaration=True)
    return path


def render_markdown(results: Sequence[GateResult], confidence: float = 0.95) -> str:
    """A GitHub-flavoured Markdown summary (for $GITHUB_STEP_SUMMARY)."""
    verdict = overall_verdict(results)
    out = [f"## {_EMOJI[verdict]} perfkit gate: {verdict}", ""]
    for r in results:
        out.append(f"### {r.model}: {_EMOJI[r.verdict]} {r.verdict}")
        out.append("")
        out.append(f"`{r.current_label}` vs baseline `{r.baseline_label}`, {r.strength}.")
        out.append("")
        for line in [f"changed: {c}" for c in r.changes] + [f"note: {n}" for n in r.notes]:
            out.append(f"- {_md(line)}")
        if r.changes or r.notes:
            out.append("")
        out.append(f"| level | metric | baseline | current | change | {confidence:.0%} CI | confidence | verdict |")
        out.append("|---|---|---:|---:|---:|---:|---:|---|")
        for f in r.findings:
            out.append(
                f"| {f.level} | {_metric_name(f)} | {fmt_value(f, f.baseline)} | {fmt_value(f, f.current)} | "
                f"{_fmt_delta(f)} | {_fmt_ci(f)} | {_fmt_conf(f)} | {_EMOJI[f.verdict]} {f.verdict} |"
            )
        reasons = [f for f in r.findings if f.explained]
        if reasons:
            out.append("")
            out += [f"- **{f.level} {f.metric}** ({f.verdict}): {_md(f.reason)}" for f in reasons]
        out.append("")
    kinds = _kinds_text(results)
    if kinds:
        out += [f"_{kinds}_", ""]
    return "\n".join(out)


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def append_step_summary(results: Sequence[GateResult], confidence: float = 0.95) -> Path | None:
    """Append the Markdown summary to $GITHUB_STEP_SUMMARY when that is set; returns the path or None."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    path = Path(target)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(render_markdown(results, confidence) + "\n")
    return path


def write_json(results: Sequence[GateResult], path: Path) -> Path:
    """Every result and finding as JSON (exit code and overall verdict included)."""
    verdict = overall_verdict(results)
    doc = {
        "schema": "perfkit.gate",
        "schema_version": 1,
        "verdict": verdict,
        "exit_code": int(EXIT_OF[verdict]),
        "results": [r.to_dict() for r in results],
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path

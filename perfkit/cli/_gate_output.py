"""The gate's output, for `perfkit gate` and `perfkit run`'s [gate] step: every finding printed, the
outputs asked for written, and the gate's exit."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click

from perfkit.gate import (
    EXIT_OF,
    GateResult,
    append_step_summary,
    gate_failure,
    overall_verdict,
    render_table,
    write_json,
    write_junit,
)
from perfkit.records import RunRecord


def emit(
    results: Sequence[GateResult],
    pairs: Sequence[tuple[RunRecord, RunRecord]],
    *,
    confidence: float,
    junit: Path | None,
    json_path: Path | None,
    report: Path | None,
) -> int:
    """Print every finding, write every output asked for, and return the exit code (shared with `run`)."""
    click.echo(render_table(results, confidence))
    if junit:
        click.echo(f"perfkit: JUnit XML: {write_junit(results, junit)}", err=True)
    if json_path:
        click.echo(f"perfkit: JSON: {write_json(results, json_path)}", err=True)
    summary = append_step_summary(results, confidence)
    if summary:
        click.echo(f"perfkit: summary appended to {summary}", err=True)
    if report:
        write_report(results, pairs, report)
    verdict = overall_verdict(results)
    return int(EXIT_OF[verdict])


def finish(results: Sequence[GateResult]) -> None:
    """Exit with the gate's code: return on pass/improvement, else raise GateFailed (10/11/12)."""
    failed = gate_failure(results)
    if failed is not None:
        raise failed
    click.echo(f"perfkit gate: {overall_verdict(results).upper()} (exit 0)", err=True)


def write_report(results: Sequence[GateResult], pairs: Sequence[tuple[RunRecord, RunRecord]], path: Path) -> None:
    """The HTML comparison report (every model's baseline and current, the verdicts first)."""
    try:
        from perfkit.report import write_comparison_report  # noqa: PLC0415
    except ImportError:
        click.echo("perfkit: --report: this build has no HTML report; skipped", err=True)
        return
    target = write_comparison_report([b for b, _ in pairs], [c for _, c in pairs], path, results=results)
    click.echo(f"perfkit: report: {target}", err=True)

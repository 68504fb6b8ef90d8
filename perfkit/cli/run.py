"""`perfkit run SWEEP`: run a whole campaign from a sweep file."""

from __future__ import annotations

from pathlib import Path

import click

from perfkit.campaign import CampaignProgress, load_sweep, run_campaign
from perfkit.cli._gate_output import emit, finish
from perfkit.cli._metrics_options import metrics_options, publish


def _echo_step(ev: CampaignProgress) -> None:
    if ev.record is not None:
        publish(ev.record)  # live metrics (--metrics-port): each profiled model's levels as it finishes
    click.echo(ev.message, err=True)


@click.command(name="run")
@metrics_options
@click.argument("sweep_file", metavar="SWEEP", type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Output folder (default: [output].dir).")
@click.option("--store", metavar="PATH", help="Results store (default: [output].store, else .perfkit/results.sqlite).")
@click.option("--no-gate", is_flag=True, help="Measure and save, but skip the [gate] step.")
@click.option("--check", is_flag=True, help="Only check the sweep file and print the plan.")
def command(sweep_file: Path, output: Path | None, store: str | None, no_gate: bool, check: bool) -> None:
    """Run the campaign a sweep file describes: serve, profile, tune, store, report, gate.

    \b
      perfkit run sweeps/ci-smoke.toml
      perfkit run sweeps/ci-smoke.toml --check
    The exit code is the gate's (0 pass, 10 regression, 11 inconclusive, 12 invalid);
    a bad sweep file exits 3 with a message naming the file and the key. See docs/sweeps.md.
    """
    sweep = load_sweep(sweep_file)
    if check:
        click.echo(f"{sweep.path}: ok: {sweep.name}")
        click.echo(
            f"  server  {sweep.server['mode']} {sweep.server.get('model_repository') or sweep.server.get('url')}"
        )
        for m in sweep.models:
            click.echo(f"  model   {m.name}: {', '.join(lv.label for lv in m.spec.levels)} ({m.spec.protocol})")
        if sweep.tune is not None:
            click.echo(f"  tune    {dict(sweep.tune)}")
        if sweep.gate:
            click.echo(f"  gate    against {sweep.gate.baseline} ({', '.join(sweep.gate.thresholds) or 'defaults'})")
        return
    result = run_campaign(sweep, output_dir=output, gate=not no_gate, store=store, on_progress=_echo_step)
    click.echo(f"perfkit run: run records in {result.output_dir}", err=True)
    if result.gate_results:
        g = sweep.gate
        assert g is not None
        emit(
            result.gate_results,
            result.gate_pairs,
            confidence=g.confidence,
            junit=g.junit,
            json_path=g.json,
            report=None,
        )
        finish(result.gate_results)

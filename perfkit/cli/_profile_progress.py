"""What `perfkit profile` prints while it measures: one line per level started, window and level done."""

from __future__ import annotations

import sys

import click

from perfkit.cli._metrics_options import publish
from perfkit.measure import LevelDone, LevelStarted, ProgressEvent, WindowMeasured, WorkersPlaced
from perfkit.records import LevelResult


def workload_lines(label: str, r: LevelResult) -> list[str]:
    """What a level of an OpenAI endpoint sent, against what the server reported receiving (and a warning)."""
    w = r.workload
    if w is None:
        return []
    rep_in = "no usage" if w.reported_input_tokens_mean is None else f"{w.reported_input_tokens_mean:.1f} reported"
    out = f"output {w.sent_output_tokens_mean:.1f} asked" if w.sent_output_tokens_mean is not None else "output free"
    if w.reported_output_tokens_mean is not None:
        out += f", {w.reported_output_tokens_mean:.1f} generated"
    lines = [
        f"  sent {w.requests} requests at {label} ({r.sent_rps:,.1f} req/s):"
        f" input {'?' if w.sent_input_tokens_mean is None else f'{w.sent_input_tokens_mean:.1f}'} tokens ({rep_in}),"
        f" {out}"
    ]
    if w.mismatch:
        lines.append(f"  WARNING: {w.mismatch}")
    return lines


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"


class ProfileProgress:
    """Prints progress events to stderr (one rewritten line per window on a terminal) and publishes them."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()

    def __call__(self, ev: ProgressEvent) -> None:
        publish(ev)  # live metrics (--metrics-port), when serving
        if isinstance(ev, WorkersPlaced):  # distributed runs: where the load workers were placed
            for w in ev.workers:
                click.echo(f"  worker {w.worker}: {w.host} (Ray node {w.node_id[:12]})", err=True)
        elif isinstance(ev, LevelStarted):
            click.echo(f"perfkit: measuring {ev.level.label} ...", err=True)
        elif isinstance(ev, WindowMeasured):
            p = ev.precision
            text = (
                f"  window {ev.window:>2}: {ev.infer_per_s:>10,.1f} infer/s  p99 {ev.p99_us / 1e3:.2f} ms"
                f"  ±tput {_pct(p.throughput_rel)}  ±lat {_pct(p.latency_rel)}"
            )
            click.echo(("\r" + text) if self.tty else text, err=True, nl=not self.tty)
        elif isinstance(ev, LevelDone):
            r = ev.result
            if self.tty:
                click.echo("", err=True)
            click.echo(
                f"  -> {r.throughput_infer_per_s:,.1f} infer/s, p99 {r.latency().p99_us / 1e3:.2f} ms,"
                f" {'stable' if r.stable else 'UNSTABLE'} after {len(r.windows)} windows",
                err=True,
            )
            if r.workload is not None:
                for line in workload_lines(ev.level.label, r):
                    click.echo(line, err=True)
            if r.note.startswith(("ended early", "the windows drifted")):  # why the level ended where it did
                end = r.note.find("; ", r.note.find("precision reached"))
                click.echo(f"  {r.note if end < 0 else r.note[:end]}", err=True)

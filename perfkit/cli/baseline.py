"""`perfkit baseline`: save, show and list run records and named baselines in the results store."""

from __future__ import annotations

from pathlib import Path

import click

from perfkit.errors import InputError
from perfkit.gate import default_store_path
from perfkit.records import RunRecord
from perfkit.store import open_store

_STORE_HELP = (
    "Results store: PATH.sqlite, or DIR/ of run-record JSON files. Default: $PERFKIT_STORE or .perfkit/results.sqlite."
)


def _store_option(fn):  # type: ignore[no-untyped-def]  # a click decorator: it returns the function click wraps
    return click.option("--store", metavar="PATH", help=_STORE_HELP)(fn)


@click.group(name="baseline")
def command() -> None:
    """Keep run records and named baselines (keyed by model, config hash, server version, machine, commit).

    \b
      perfkit baseline save run.json --name main
      perfkit baseline save run.json --name main --store baselines/   # JSON files to commit
      perfkit baseline list --model sleeper
      perfkit gate --baseline main --current new.json
    """


@command.command(name="save")
@click.argument("run_record", type=click.Path(path_type=Path))
@click.option("--name", help="Name it a baseline (a name moves to the newest save).")
@_store_option
def save(run_record: Path, name: str | None, store: str | None) -> None:
    """Save RUN_RECORD into the store (optionally as the baseline NAME)."""
    record = RunRecord.load(run_record)
    path = store or str(default_store_path())
    with open_store(path) as st:
        run_id = st.save(record, name)
    click.echo(f"saved {run_record} as {run_id}" + (f" (baseline {name!r})" if name else "") + f" in {path}")


@command.command(name="show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the whole run record as JSON.")
@_store_option
def show(name: str, as_json: bool, store: str | None) -> None:
    """Show the baseline or run NAME (an id works too)."""
    path = store or str(default_store_path())
    if not Path(path).exists():
        raise InputError(f"store {path} does not exist", hint="save one with `perfkit baseline save RUN --name NAME`")
    with open_store(path) as st:
        entry = st.entry(name)
        record = st.get(entry.id)
    if as_json:
        click.echo(record.to_json())
        return
    for label, value in (
        ("id", entry.id),
        ("name", entry.name or "-"),
        ("model", entry.model),
        ("served config sha256", entry.served_config_sha256[:16] or "-"),
        ("server version", entry.server_version or "-"),
        ("machine", entry.machine or "-"),
        ("commit", entry.commit[:12] or "-"),
        ("created", entry.created_utc),
        ("saved", entry.saved_utc),
        ("where", entry.location),
        ("status", record.status),
    ):
        click.echo(f"{label:15} {value}")
    for lv in record.levels:
        lat = lv.latency()
        click.echo(
            f"  {lv.load.label:24} {lv.throughput_infer_per_s:10.1f} infer/s  p50 {lat.p50_us / 1000:.3g} ms  "
            f"p99 {lat.p99_us / 1000:.3g} ms ({lat.kind}, {lat.count} samples, {len(lv.windows)} windows)"
        )


@command.command(name="list")
@click.option("-m", "--model", help="Only this model.")
@_store_option
def list_(model: str | None, store: str | None) -> None:
    """List stored runs, newest first (named baselines marked)."""
    path = store or str(default_store_path())
    if not Path(path).exists():
        click.echo(f"(store {path} does not exist yet)")
        return
    with open_store(path) as st:
        entries = st.list(model)
    if not entries:
        click.echo("(no runs)")
        return
    click.echo(f"{'id':12}  {'name':16}  {'model':14}  {'config':12}  {'server':8}  {'commit':8}  created")
    for e in entries:
        click.echo(
            f"{e.id:12}  {(e.name or '-'):16}  {e.model:14}  {e.served_config_sha256[:12]:12}  "
            f"{(e.server_version or '-'):8}  {(e.commit[:8] or '-'):8}  {e.created_utc}"
        )

"""`perfkit history`: each metric's series over the results store, its change points, and a CI verdict."""

from __future__ import annotations

import json
from pathlib import Path

import click

from perfkit.errors import ExitCode, UsageError
from perfkit.gate import default_store_path, parse_job_noise
from perfkit.history import (
    DEFAULT_HISTORY_METRICS,
    HISTORY_METRICS,
    ChangeOptions,
    HistoryFilter,
    detect_all,
    read_store,
    series_of,
)
from perfkit.records import to_dict
from perfkit.report import write_history_report

_DEFAULTS = ChangeOptions()


@click.command(name="history")
@click.option("--store", metavar="PATH", help="Results store (default: $PERFKIT_STORE or .perfkit/results.sqlite).")
@click.option("--model", "models", multiple=True, help="Only this model (repeat for several).")
@click.option("--machine", help="Only runs of this machine key (or a prefix of it: the hostname).")
@click.option(
    "--metric",
    "metrics",
    multiple=True,
    type=click.Choice(HISTORY_METRICS),
    help=f"Metrics to follow (default: {', '.join(DEFAULT_HISTORY_METRICS)}).",
)
@click.option("--branch", help="Only runs saved from this branch (the store keeps each run's branch).")
@click.option("--sweep", help="Only runs a `perfkit run` of this sweep file measured (its name or path).")
@click.option("--last", type=click.IntRange(min=2), help="Only each model's last N runs.")
@click.option(
    "--alpha", type=click.FloatRange(0, 1, min_open=True), default=_DEFAULTS.alpha, show_default=True,
    help="Significance level of the change-point permutation test.",
)  # fmt: skip
@click.option(
    "--min-change",
    "min_change_pct",
    type=click.FloatRange(min=0),
    help="Smallest change reported, in percent (default: the metric's job-to-job noise, see --job-noise).",
)
@click.option(
    "--job-noise", "job_noise", multiple=True, metavar="METRIC:PCT%",
    help="Job-to-job noise per metric, as `perfkit gate --job-noise` takes it (widens each run's interval).",
)  # fmt: skip
@click.option("--fail-on-change", is_flag=True, help="Exit 13 when a recent change point is a regression.")
@click.option(
    "--recent", type=click.IntRange(min=1), default=10, show_default=True,
    help="With --fail-on-change: only changes whose first run is among a series' last N runs fail.",
)  # fmt: skip
@click.option("--html", "html", type=click.Path(dir_okay=False, path_type=Path), help="Write the history report here.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), help="Write series and changes.")
def command(
    store: str | None,
    models: tuple[str, ...],
    machine: str | None,
    branch: str | None,
    sweep: str | None,
    metrics: tuple[str, ...],
    last: int | None,
    alpha: float,
    min_change_pct: float | None,
    job_noise: tuple[str, ...],
    fail_on_change: bool,
    recent: int,
    html: Path | None,
    json_path: Path | None,
) -> int:
    """Each metric's history (per model and load level) over the runs in the results store, with its
    change points (E-divisive means, as in MongoDB's CI and Hunter/Otava).

    \b
      perfkit history --model sleeper
      perfkit history --fail-on-change --html reports/history.html   # in CI, after saving the run
    """
    from perfkit.store import open_store  # noqa: PLC0415

    flt = HistoryFilter(
        models=models,
        machine=machine,
        branch=branch,
        sweep=sweep,
        last=last,
        metrics=metrics or DEFAULT_HISTORY_METRICS,
        job_noise_pct=parse_job_noise(job_noise),
    )
    opts = ChangeOptions(alpha=alpha, min_change_pct=min_change_pct)
    path = store or str(default_store_path())
    with open_store(path) as st:
        series = series_of(read_store(st, flt), flt)
    if not series:
        raise UsageError(f"no runs in store {path} match", hint="see `perfkit baseline list --store PATH`")
    changes = detect_all(series, opts)
    for s in series:
        last_point = s.points[-1]
        n_changes = sum(1 for c in changes if (c.model, c.level, c.metric) == (s.model, s.level, s.metric))
        click.echo(
            f"{s.model} {s.level} {s.metric}: {len(s.points)} runs, latest {last_point.value:.4g} {s.unit}"
            f" [{last_point.low:.4g}, {last_point.high:.4g}], {n_changes} change point(s)"
        )
    for c in changes:
        click.echo(c.line())
    if html is not None:
        out = write_history_report(series, changes, html)
        click.echo(f"perfkit: wrote history report {out}", err=True)
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps({"series": to_dict(series), "changes": to_dict(changes)}, indent=1) + "\n")
    if fail_on_change:
        length = {(s.model, s.level, s.metric): len(s.points) for s in series}
        failing = [
            c
            for c in changes
            if c.direction == "regression" and c.index >= length[(c.model, c.level, c.metric)] - recent
        ]
        if failing:
            click.echo(
                f"perfkit history: {len(failing)} regression change point(s) in the last {recent} runs", err=True
            )
            return int(ExitCode.HISTORY_CHANGE)
    return int(ExitCode.OK)

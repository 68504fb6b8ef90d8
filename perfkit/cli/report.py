"""`perfkit report`: one self-contained HTML file from run records or a tune folder."""

from __future__ import annotations

from pathlib import Path

import click

from perfkit.errors import UsageError
from perfkit.gate import GateOptions, parse_job_noise, parse_thresholds
from perfkit.records import RunRecord
from perfkit.report import (
    DEFAULT_REPORTS_DIR,
    load_inputs,
    write_comparison_report,
    write_profile_report,
    write_tune_report,
)


@click.command(name="report")
@click.argument("inputs", nargs=-1, type=click.Path(path_type=Path), metavar="RUN_RECORD_OR_TUNE_DIR...")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=DEFAULT_REPORTS_DIR / "report.html",
    show_default=True,
    help="HTML file to write.",
)
@click.option("--compare", is_flag=True, help="Compare: the first input is the baseline, the others the current runs.")
@click.option(
    "--threshold",
    "thresholds",
    multiple=True,
    metavar="METRIC:CHANGE",
    help="A comparison's thresholds, as `perfkit gate --threshold` takes them (default: the gate's defaults).",
)
@click.option(
    "--job-noise",
    "job_noise",
    multiple=True,
    metavar="METRIC:PCT%",
    help="A comparison's job-to-job noise allowance, as `perfkit gate --job-noise` takes it.",
)
@click.option(
    "--history",
    "history_store",
    metavar="STORE",
    help="Write the history page of every run in this results store (as `perfkit history --html` does).",
)
def command(
    inputs: tuple[Path, ...],
    output: Path,
    compare: bool,
    thresholds: tuple[str, ...],
    job_noise: tuple[str, ...],
    history_store: str | None,
) -> None:
    """Write a self-contained HTML report (works offline) from run records or a tune folder.

    \b
    One tune folder (perfkit tune -o DIR)          -> tune report
    --compare, or runs of one model with different
    configs                                        -> comparison (first input = baseline)
    otherwise                                      -> profile report of every run
    --history STORE (no inputs)                    -> history of the store's runs, with change points

    Example:

        perfkit report run.json -o report.html
    """
    if history_store is not None:
        if inputs:
            raise UsageError("--history reads the store: give it no run records or tune folders")
        _history(history_store, job_noise, output)
        return
    if not inputs:
        raise UsageError("give run records or a tune folder (or --history STORE)")
    runs, tunes = load_inputs(list(inputs))
    options = GateOptions(  # the gate's, judged alike
        thresholds=tuple(parse_thresholds(list(thresholds))), job_noise_pct=parse_job_noise(job_noise)
    )
    if compare:
        if len(inputs) < 2:
            raise UsageError("--compare needs a baseline and at least one current input")
        baseline, _ = load_inputs([inputs[0]])
        current, _ = load_inputs(list(inputs[1:]))
        if not baseline or not current:
            raise UsageError("--compare needs run records on both sides (tune folders without runs/ have none)")
        path = write_comparison_report(baseline, current, output, options=options)
        kind = "comparison"
    elif tunes:
        if len(tunes) > 1:
            raise UsageError(f"give one tune folder per report ({len(tunes)} given)")
        path = write_tune_report(tunes[0], output, runs)
        kind = "tune"
    elif _is_config_comparison(runs):
        path = write_comparison_report(runs[:1], runs[1:], output, options=options)
        kind = "comparison"
    else:
        path = write_profile_report(runs, output)
        kind = "profile"
    size_kib = path.stat().st_size / 1024
    click.echo(f"perfkit: wrote {kind} report {path} ({size_kib:,.0f} KiB)", err=True)


def _is_config_comparison(runs: list[RunRecord]) -> bool:
    models = {r.model.name for r in runs}
    configs = {r.model.served_config_sha256 for r in runs}
    return len(runs) >= 2 and len(models) == 1 and len(configs) > 1


def _history(store: str, job_noise: tuple[str, ...], output: Path) -> None:
    from perfkit.history import ChangeOptions, HistoryFilter, detect_all, read_store, series_of  # noqa: PLC0415
    from perfkit.report import write_history_report  # noqa: PLC0415
    from perfkit.store import open_store  # noqa: PLC0415

    flt = HistoryFilter(job_noise_pct=parse_job_noise(job_noise))
    with open_store(store) as st:
        series = series_of(read_store(st, flt), flt)
    path = write_history_report(series, detect_all(series, ChangeOptions()), output)
    click.echo(f"perfkit: wrote history report {path} ({path.stat().st_size / 1024:,.0f} KiB)", err=True)

"""`perfkit tune`: search model configs for the most throughput within a latency budget."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import click

from perfkit.cli._metrics_options import metrics_options, publish
from perfkit.cli._server_options import build_server_options, server_options
from perfkit.cli._tune_options import SETTINGS_FLAGS, SPACE_FLAGS, tune_options
from perfkit.cli._tune_preview import dry_run as preview_dry_run
from perfkit.cli._tune_preview import parse_composing, planned_gpus
from perfkit.errors import InputError, UsageError
from perfkit.tuner import (
    SETTINGS_KEYS,
    RayPlacement,
    TuneSettings,
    TuneSpace,
    parse_budget,
    parse_max_error_rate,
    run_tune,
)


def _read_tune_table(path: Path) -> dict[str, Any]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]  # same API; mypy sees both names bound
    try:
        data = tomllib.loads(path.read_text())
    except OSError as err:
        raise InputError(f"sweep file {path}: cannot read: {err.strerror}") from None
    except tomllib.TOMLDecodeError as err:
        raise InputError(f"sweep file {path}: invalid TOML: {err}") from None
    table = data.get("tune")
    if not isinstance(table, dict):
        raise InputError(f"sweep file {path} has no [tune] section")
    return table


def _echo_event(event: Any) -> None:
    publish(event)  # live metrics (--metrics-port), when serving
    click.echo(event.line())


def _note(text: str, newline: bool) -> None:
    click.echo(text, err=True, nl=newline)


def _served_text(kwargs: dict[str, Any], url: str, model: str) -> str:
    """--dry-run with -u and no repository: the config the server at url serves for model, as text."""
    from perfkit.server.api_route import served_config_text
    from perfkit.server.launch import open_server

    opts = build_server_options(kwargs, url=url, models=(model,))
    with open_server(opts) as server:
        text = served_config_text(server, model)
    click.echo(f"perfkit: planning from the config {url} serves for {model!r} (no model repository given)", err=True)
    return text


@click.command(name="tune")
@metrics_options
@tune_options
@server_options()
def command(  # noqa: PLR0917
    models: tuple[str, ...],
    mix_text: str | None,
    output_dir: Path | None,
    resume: bool,
    storage: str | None,
    study_name: str | None,
    apply: bool,
    apply_via: str | None,
    dry_run: bool,
    assume_gpu: bool,
    composing_models: str | None,
    space_file: Path | None,
    url: str | None,
    report_path: Path | None,
    ray_address: str | None = None,
    tune_workers: int | None = None,
    gpus_per_worker: float = 0.0,
    **kwargs: Any,
) -> None:
    """Search configs of one model (or of several sharing a server, under a traffic mix) for the most
    throughput within a latency budget.

    Searches max_batch_size, dynamic batching (queue delay, preferred batch sizes), instance
    count (and kind) and precision; reloads the model for each candidate; always puts your
    config.pbtxt back. Example:

        perfkit tune -m batcher --model-repository models --latency-budget 20ms --trials 20

        perfkit tune -m model_a -m model_b --mix model_a:3,model_b:1 --latency-budget model_a:20ms,model_b:50ms
    """
    table = _read_tune_table(space_file) if space_file else {}
    source = f"{space_file} [tune]" if space_file else "flags"
    space_flags = {k: kwargs.pop(k) for k in SPACE_FLAGS}
    flags = {key: kwargs.pop(key) for key in SETTINGS_FLAGS}
    space = TuneSpace.from_mapping(
        {**table, **{k: v for k, v in space_flags.items() if v is not None}}, source=source, ignore=SETTINGS_KEYS
    )
    budget, mix = parse_budget(models, flags.pop("latency_budget"), mix_text)
    rate = parse_max_error_rate({**table, **{k: v for k, v in flags.items() if v is not None}}, "--max-error-rate")
    budget = dataclasses.replace(budget, max_error_rate=rate)  # the dry run plans the queue knobs by it
    if mix:
        for given, flag in ((dry_run, "--dry-run"), (ray_address, "--ray"), (composing_models, "--composing-models"),
                            (flags["load"] == "trace", "--load trace")):  # fmt: skip
            if given:
                raise UsageError(
                    f"{flag} is not supported when tuning a traffic mix ({', '.join(models)})",
                    hint="tune the mix without it, or each model on its own",
                )
    if assume_gpu and not dry_run:
        raise UsageError("--assume-gpu plans a server: use it with --dry-run")
    composing = parse_composing(composing_models)
    if dry_run:
        served = None
        if kwargs.get("model_repository") is None and url and not composing:
            served = _served_text(dict(kwargs), url, models[0])
        preview_dry_run(models[0], space, kwargs.get("model_repository"), composing,
                        budget=budget,
                        gpus=planned_gpus(kwargs.get("gpus"), assume_gpu), output_dir=output_dir,
                        served_text=served)  # fmt: skip
        return
    settings = TuneSettings.from_mapping(
        models[0],
        {k: v for k, v in table.items() if k in SETTINGS_KEYS},
        source=source,
        flags=flags,
        budget=budget,
        mix=mix,
        output_dir=output_dir,
        storage=storage,
        study_name=study_name,
        resume=resume,
        apply=apply,
        command=("perfkit", *sys.argv[1:]) if sys.argv else (),
    )
    opts = build_server_options(kwargs, url=url, models=(*models, *composing))
    ray = RayPlacement(ray_address, tune_workers, gpus_per_worker)
    out = run_tune(opts, settings, space, composing=composing, ray=ray, apply_via=apply_via, on_event=_echo_event,
                   say=click.echo, note=_note)  # fmt: skip
    if report_path is not None:
        from perfkit.report import load_inputs, write_tune_report

        runs, tunes = load_inputs([out])
        write_tune_report(tunes[0], report_path, runs)
        click.echo(f"perfkit: tune report written to {report_path}", err=True)

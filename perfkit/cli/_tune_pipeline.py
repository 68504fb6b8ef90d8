"""`perfkit tune` on a pipeline: an ensemble, or a BLS model with --composing-models."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from perfkit.errors import ConfigError, UsageError
from perfkit.server.launch import open_server
from perfkit.tuner import (
    TuneSettings,
    TuneSpace,
    describe_pipeline,
    preview_pipeline,
    tune,
    write_pipeline_candidates,
)


def parse_composing(text: str | None) -> tuple[str, ...]:
    """--composing-models a,b as model names (empty when not given)."""
    return tuple(dict.fromkeys(m.strip() for m in (text or "").split(",") if m.strip()))


def dry_run(
    model: str,
    space: TuneSpace,
    repository: Path | None,
    composing: Sequence[str],
    *,
    latency_budget_ms: float,
    gpus: int,
    output_dir: Path | None,
) -> None:
    """Print every step's space and the joint candidates; exit 3 (ConfigError) when nothing can be tuned."""
    if repository is None:
        raise UsageError("perfkit tune --dry-run needs --model-repository DIR: the folder holding the pipeline")
    pp = preview_pipeline(space, repository, model, composing=composing, latency_budget_us=latency_budget_ms * 1e3,
                       gpus=gpus)  # fmt: skip
    for line in describe_pipeline(pp):
        click.echo(line)
    if pp.refused:
        raise ConfigError(pp.refused, hint="each step's reason is shown above")
    if output_dir is not None:
        paths = write_pipeline_candidates(pp, output_dir)
        click.echo(f"perfkit: {len(paths)} candidate configs written to {output_dir / 'candidates'}", err=True)


def run(opts: Any, settings: TuneSettings, space: TuneSpace, composing: Sequence[str]) -> Path:
    """Launch (or reach) the server and tune the pipeline; returns the output folder."""
    what = f"{settings.model} with {', '.join(composing)}" if composing else settings.model
    click.echo(f"perfkit: tuning the pipeline {what} end to end", err=True)
    click.echo(f"perfkit: starting {opts.mode} Triton server ..." if opts.mode != "remote" else "", err=True, nl=False)
    with open_server(opts) as server:
        if opts.mode != "remote":
            click.echo(f" ready at {server.endpoints.http_url}", err=True)
        result = tune(server, settings, space, model_repository=opts.model_repository, composing=composing,
                      on_event=lambda e: click.echo(e.line()))  # fmt: skip
    return result.output_dir


def run_mix(opts: Any, settings: TuneSettings, space: TuneSpace) -> Path:
    """Launch (or reach) the server and tune the models of a traffic mix jointly; returns the output folder."""
    mix = ",".join(f"{m}:{w}" for m, w in settings.mix)
    budgets = ", ".join(f"{m} {b:g} ms" for m, b in settings.mix_budgets_ms)
    click.echo(f"perfkit: tuning the traffic mix {mix} jointly (p{settings.percentile:g} budgets: {budgets})", err=True)
    click.echo(f"perfkit: starting {opts.mode} Triton server ..." if opts.mode != "remote" else "", err=True, nl=False)
    with open_server(opts) as server:
        if opts.mode != "remote":
            click.echo(f" ready at {server.endpoints.http_url}", err=True)
        result = tune(server, settings, space, model_repository=opts.model_repository,
                      on_event=lambda e: click.echo(e.line()))  # fmt: skip
    return result.output_dir

"""`perfkit tune --dry-run`: the space and the candidates, validated, for one model or for a
pipeline (an ensemble, or a BLS model with --composing-models); no server, no writes but
--output-dir's candidates."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click

from perfkit.errors import ConfigError, UsageError
from perfkit.records import Budget
from perfkit.tuner import (
    TuneSpace,
    describe,
    describe_pipeline,
    is_pipeline,
    preview,
    preview_pipeline,
    write_candidates,
    write_pipeline_candidates,
)


def parse_composing(text: str | None) -> tuple[str, ...]:
    """--composing-models a,b as model names (empty when not given)."""
    return tuple(dict.fromkeys(m.strip() for m in (text or "").split(",") if m.strip()))


def planned_gpus(gpus: str | None, assume_gpu: bool) -> int:
    """GPUs to preview for: --gpus ids '0,1' (or 'all', counted as one), else 1 with --assume-gpu."""
    if not gpus:
        return 1 if assume_gpu else 0
    if gpus.strip().lower() == "all":
        return 1
    ids = [g for g in gpus.split(",") if g.strip()]
    if not all(g.strip().isdigit() for g in ids):
        raise UsageError(f"--gpus {gpus!r}: give 'all' or GPU ids, e.g. 0,1")
    return len(ids)


def dry_run(
    model: str,
    space: TuneSpace,
    repository: Path | None,
    composing: Sequence[str],
    *,
    budget: Budget,
    gpus: int,
    output_dir: Path | None,
    served_text: str | None = None,
) -> None:
    """Print the space and the candidates (every step's and the joint ones for a pipeline); exit 3
    (ConfigError) when nothing can be tuned. repository None: one model planned from `served_text`
    (the config a running server serves)."""
    if composing or is_pipeline(repository, model):
        _pipeline(model, space, repository, composing, budget=budget, gpus=gpus, output_dir=output_dir)
        return
    if repository is None and served_text is None:
        raise UsageError(
            "perfkit tune --dry-run needs --model-repository DIR: the folder holding the model",
            hint="or -u HOST:PORT of a server serving it (planned from its served config)",
        )
    the_preview = preview(
        space, repository, model, latency_budget_us=budget.latency_budget_us, gpus=gpus, budget_metric=budget.metric,
        served_text=served_text, max_error_rate=budget.max_error_rate,
    )  # fmt: skip
    for line in describe(the_preview):
        click.echo(line)
    if the_preview.refused:
        raise ConfigError(the_preview.refused)
    if output_dir is not None:
        paths = write_candidates(the_preview, output_dir)
        click.echo(f"perfkit: {len(paths)} candidate configs written to {output_dir / 'candidates'}", err=True)


def _pipeline(
    model: str,
    space: TuneSpace,
    repository: Path | None,
    composing: Sequence[str],
    *,
    budget: Budget,
    gpus: int,
    output_dir: Path | None,
) -> None:
    if repository is None:
        raise UsageError("perfkit tune --dry-run needs --model-repository DIR: the folder holding the pipeline")
    pp = preview_pipeline(space, repository, model, composing=composing, latency_budget_us=budget.latency_budget_us,
                          gpus=gpus)  # fmt: skip
    for line in describe_pipeline(pp):
        click.echo(line)
    if pp.refused:
        raise ConfigError(pp.refused, hint="each step's reason is shown above")
    if output_dir is not None:
        paths = write_pipeline_candidates(pp, output_dir)
        click.echo(f"perfkit: {len(paths)} candidate configs written to {output_dir / 'candidates'}", err=True)

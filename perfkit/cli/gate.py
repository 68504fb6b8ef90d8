"""`perfkit gate`: fail CI when performance regresses against a baseline (or in an A/B run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from perfkit.cli._gate_output import emit, finish
from perfkit.cli._server_options import build_server_options, server_options
from perfkit.errors import UsageError
from perfkit.gate import (
    DEFAULT_JOB_NOISE_PCT,
    DEFAULT_THRESHOLDS,
    GateOptions,
    parse_job_noise,
    parse_thresholds,
    stored_gate,
)
from perfkit.records import ProfileSpec, spec_defaults

# Defaults defined once: the gate's on GateOptions, the measurement's on ProfileSpec.
_G = GateOptions()
_D = spec_defaults()


@click.command(name="gate")
@click.option("--baseline", "baseline_ref", metavar="RUN", help="Baseline: run-record file, directory, or store name.")
@click.option("--current", "current_ref", metavar="RUN", help="Current run: run-record file, directory, or store name.")
@click.option(
    "--store", type=click.Path(path_type=Path), help="Results store for names (default .perfkit/results.sqlite)."
)
@click.option("-m", "--model", help="Model to pick from a directory of runs; the model to measure with --ab.")
@click.option(
    "--threshold",
    "thresholds",
    multiple=True,
    metavar="METRIC:CHANGE",
    help="Allowed change toward worse, repeatable: throughput:-5%, p99:+10%, p99:+2ms, throughput:-50/s. "
    "Metrics: throughput, p50, p90, p95, p99, p999; streamed runs also ttft_p50, ttft_p99 (ttft), itl_p50, "
    "itl_p99 (itl), tokens (tokens/s). Default: " + " and ".join(DEFAULT_THRESHOLDS) + ". "
    "MODEL:METRIC:CHANGE (model_b:p99:+2ms) judges only that model, alone or in a traffic mix, on top of the others.",
)
@click.option(
    "--job-noise",
    "job_noise",
    multiple=True,
    metavar="METRIC:PCT%",
    help="Stored baselines: how much one job's figure moves job to job with nothing changed (relative sd), "
    "repeatable: p99:5%, throughput:1%, all:0%. A change within two jobs' noise passes (with a note). Default: "
    + ", ".join(f"{m} {v:g}%" for m, v in DEFAULT_JOB_NOISE_PCT.items() if m in ("throughput", "p50", "p99"))
    + " (and the rest: docs/guides/ci-gates.md). A/B needs none.",
)
@click.option("--confidence", type=click.FloatRange(0.5, 0.999), default=_G.confidence, show_default=True,
              help="Confidence of the intervals; a change is significant when its interval excludes zero.")  # fmt: skip
@click.option("--allow-different-load", is_flag=True, help="Compare although levels, batch size or protocol differ.")
@click.option("--allow-different-machine", is_flag=True, help="Compare although the hardware differs.")
@click.option(
    "--max-error-fraction", type=float, default=_G.max_error_fraction, show_default=True, help="More errors: invalid."
)
@click.option("--junit", type=click.Path(path_type=Path), help="Write JUnit XML (a test case per level and metric).")
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="Write every finding as JSON.")
@click.option("--report", type=click.Path(path_type=Path), help="Write an HTML comparison report.")
@click.option("--ab", is_flag=True, help="A/B mode: measure --baseline-config and --candidate-config alternately.")
@click.option("--baseline-config", type=click.Path(path_type=Path), help="A/B: the baseline config.pbtxt.")
@click.option("--candidate-config", type=click.Path(path_type=Path), help="A/B: the candidate config.pbtxt.")
@click.option("--rounds", type=click.IntRange(1, 50), default=3, show_default=True, help="A/B: rounds per config.")
@click.option("--concurrency", "concurrency", type=int, multiple=True, help="A/B: concurrency level (repeatable).")
@click.option("--request-rate", "rates", type=float, multiple=True, help="A/B: request rate level (repeatable).")
@click.option("--request-distribution", type=click.Choice(["constant", "poisson"]), default="constant")
@click.option("-b", "--batch-size", type=int, default=_D["batch_size"], show_default=True, help="A/B: batch size.")
@click.option("-i", "--protocol", type=click.Choice(["http", "grpc"]), default=_D["protocol"], show_default=True)
@click.option(
    "--measurement-interval",
    "interval_ms",
    type=float,
    default=_D["measurement_interval_ms"],
    show_default=True,
    help="A/B: window length in ms.",
)
@click.option("--max-trials", type=int, default=6, show_default=True, help="A/B: most windows per level and round.")
@click.option(
    "--min-windows",
    type=int,
    default=_D["min_windows"],
    show_default=True,
    help="A/B: fewest windows per level and round.",
)
@click.option("-o", "--output", type=click.Path(path_type=Path), help="A/B: save the pooled run records here.")
@click.option("-u", "--url", help="A/B: a running Triton server (its repository must be --model-repository).")
@server_options()
def command(  # noqa: PLR0917  (click passes every option)
    baseline_ref: str | None,
    current_ref: str | None,
    store: str | None,
    model: str | None,
    thresholds: tuple[str, ...],
    job_noise: tuple[str, ...],
    confidence: float,
    allow_different_load: bool,
    allow_different_machine: bool,
    max_error_fraction: float,
    junit: Path | None,
    json_path: Path | None,
    report: Path | None,
    ab: bool,
    baseline_config: Path | None,
    candidate_config: Path | None,
    rounds: int,
    concurrency: tuple[int, ...],
    rates: tuple[float, ...],
    request_distribution: str,
    batch_size: int,
    protocol: str,
    interval_ms: float,
    max_trials: int,
    min_windows: int,
    output: Path | None,
    url: str | None,
    **server_kwargs: Any,
) -> None:
    """Compare a run against a baseline and fail (exit 10) when it regressed.

    \b
    Stored baseline (any two runs):
      perfkit gate --baseline baselines/ --current run.json --junit gate.xml
    A/B in one job (recommended: both configs on the same server, alternately):
      perfkit gate --ab -m MODEL --model-repository models \\
          --baseline-config main.pbtxt --candidate-config pr.pbtxt --concurrency 4

    A regression must be past its threshold AND significant (a seeded bootstrap over
    the per-window samples of both runs). Every finding is printed before exiting.
    Exit: 0 pass/improvement, 10 regression, 11 inconclusive, 12 invalid or not
    comparable, 2 usage, 3 bad input. Markdown goes to $GITHUB_STEP_SUMMARY when set.
    """
    opts = GateOptions(
        thresholds=tuple(parse_thresholds(list(thresholds))),
        job_noise_pct=parse_job_noise(job_noise),
        confidence=confidence,
        allow_different_load=allow_different_load,
        allow_different_machine=allow_different_machine,
        max_error_fraction=max_error_fraction,
    )
    if not ab:
        results, pairs = stored_gate(baseline_ref, current_ref, opts, model=model, store=store)
    else:
        from perfkit.gate.ab import ab_gate, ab_levels  # noqa: PLC0415  # the load generator only for an A/B run

        if baseline_ref or current_ref:
            raise UsageError("--ab measures both arms itself: drop --baseline/--current")
        if not (baseline_config and candidate_config and model):
            raise UsageError("--ab needs --baseline-config, --candidate-config and -m MODEL")
        spec = ProfileSpec(
            model=model,
            levels=ab_levels(concurrency, rates, request_distribution),
            protocol=protocol,  # type: ignore[arg-type]  # click.Choice limits protocol to http or grpc
            batch_size=batch_size,
            measurement_interval_ms=interval_ms,
            max_trials=max_trials,
            min_windows=min_windows,
        )
        server_opts = build_server_options(server_kwargs, url=url, models=(model,))
        results, pairs = ab_gate(
            server_opts, spec, baseline_config, candidate_config, opts, rounds=rounds, output=output,
            on_start=lambda plan: click.echo(f"perfkit: A/B gate of {plan.model}: {plan.rounds} rounds per config ...",
                                             err=True),
            on_round=lambda n, arm: click.echo(f"perfkit: round {n}: {arm}", err=True),
            on_saved=lambda out: click.echo(f"perfkit: pooled run records in {out}", err=True),
        )  # fmt: skip
    emit(results, pairs, confidence=confidence, junit=junit, json_path=json_path, report=report)
    finish(results)

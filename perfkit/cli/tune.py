"""`perfkit tune`: search model configs for the most throughput within a latency budget."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from perfkit.cli import _tune_pipeline
from perfkit.cli._metrics_options import metrics_options, publish
from perfkit.cli._server_options import build_server_options, server_options
from perfkit.errors import ConfigError, InputError, UsageError
from perfkit.server.launch import open_server
from perfkit.tuner import (
    SETTINGS_KEYS,
    TuneSettings,
    TuneSpace,
    describe,
    is_pipeline,
    parse_bytes,
    parse_duration_s,
    parse_latency_budget,
    parse_max_output_diff,
    plan,
    tune,
    write_candidates,
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


def _planned_gpus(gpus: str | None, assume_gpu: bool) -> int:
    """GPUs to plan for: --gpus ids '0,1' (or 'all', counted as one), else 1 with --assume-gpu."""
    if not gpus:
        return 1 if assume_gpu else 0
    if gpus.strip().lower() == "all":
        return 1
    ids = [g for g in gpus.split(",") if g.strip()]
    if not all(g.strip().isdigit() for g in ids):
        raise UsageError(f"--gpus {gpus!r}: give 'all' or GPU ids, e.g. 0,1")
    return len(ids)


def _dry_run(
    model: str,
    space: TuneSpace,
    repository: Path | None,
    *,
    latency_budget_ms: float,
    gpus: int,
    output_dir: Path | None,
    budget_metric: str = "latency",
) -> None:
    if repository is None:
        raise UsageError("perfkit tune --dry-run needs --model-repository DIR: the folder holding the model")
    the_plan = plan(
        space, repository, model, latency_budget_us=latency_budget_ms * 1e3, gpus=gpus, budget_metric=budget_metric
    )
    for line in describe(the_plan):
        click.echo(line)
    if the_plan.refused:
        raise ConfigError(the_plan.refused)
    if output_dir is not None:
        paths = write_candidates(the_plan, output_dir)
        click.echo(f"perfkit: {len(paths)} candidate configs written to {output_dir / 'candidates'}", err=True)


def _echo_event(event: Any) -> None:
    publish(event)  # live metrics (--metrics-port), when serving
    click.echo(event.line())


@click.command(name="tune")
@metrics_options
@click.option(
    "-m",
    "--model",
    "models",
    required=True,
    multiple=True,
    help="Model to tune (its folder in the model repository). Repeat it to tune models sharing the server"
    " jointly, under the traffic mix --mix gives.",
)
@click.option(
    "--mix",
    "mix_text",
    default=None,
    metavar="MODEL:WEIGHT,...",
    help="With several -m: the traffic mix each trial is measured at (batcher:3,hungry:1); default equal weights.",
)
@click.option(
    "--latency-budget",
    required=True,
    help="Budget for the percentile: end-to-end latency (20ms, 0.5s, 800us), or for a decoupled model"
    " time to first token (ttft:300ms) or inter-token latency (itl:20ms). With several -m: each model's"
    " (batcher:20ms,hungry:50ms), or one for all.",
)
@click.option("--percentile", type=float, default=99.0, show_default=True, help="Percentile held to the budget.")
@click.option("--trials", type=int, default=None, help="Trials in the study (default 20; counts resumed ones).")
@click.option("--max-time", default=None, help="Bound the whole tune, e.g. 10m (trials stop in time to confirm).")
@click.option("-o", "--output-dir", type=click.Path(path_type=Path), help="Default: runs/tune-<model>-<timestamp>.")
@click.option("--resume", is_flag=True, help="Continue an interrupted study (same -o DIR or --storage).")
@click.option("--storage", help="Optuna storage URL (default sqlite:///DIR/study.db; postgresql://... to share).")
@click.option("--study-name", help="Study name (default tune-<model>); naming one joins it if it exists.")
@click.option("--apply", is_flag=True, help="Write the best config into the repository (backup kept).")
@click.option(
    "--objective",
    type=click.Choice(["throughput", "pareto", "per-instance", "per-gpu", "goodput"]),
    default=None,
    help="Default: throughput (within the budget). per-instance / per-gpu: throughput over the instances or GPUs"
    " the config occupies; goodput: streamed requests meeting every --goodput SLO per second (decoupled models);"
    " pareto: throughput and latency.",
)
@click.option("--goodput", "goodput_slos", help="With --objective goodput: the SLOs, e.g. ttft:200ms,itl:20ms.")
@click.option("--seed", type=int, default=None, help="Sampler seed (default 0).")
@click.option(
    "--sampler",
    type=click.Choice(["auto", "grid", "random"]),
    default="auto",
    show_default=True,
    help="auto: TPE (NSGA-II for pareto); grid: every point (ranges at 4 log-spaced values); random.",
)
@click.option(
    "--search",
    "search_kind",
    type=click.Choice(["measure", "predict"]),
    default=None,
    help="measure (default): every trial measured; predict: calibrate on the server, predict every config,"
    " measure the best predicted (the measured search takes over where predictions miss).",
)
@click.option("--min-throughput", type=float, help="Constraint: infer/s at least this.")
@click.option("--max-gpu-memory", help="Constraint: GPU memory used at most this, e.g. 8GiB.")
@click.option(
    "--max-output-diff",
    help="Accuracy guard: how far a candidate's outputs may differ from the original config's on the same "
    "inputs: a relative difference (1e-3), abs=X,rel=Y, or off. Default by output datatype: FP32 2e-3, "
    "FP16/BF16 1e-2, integers and strings exact.",
)
@click.option(
    "--max-batch-sizes",
    help="max_batch_size values, e.g. 1,2,4,8 (default: powers of 2 up to 128, or the model's own for TensorRT).",
)
@click.option("--max-batch-size-limit", type=int, help="Highest max_batch_size explored by default (default 128).")
@click.option(
    "--dynamic-batching/--no-dynamic-batching",
    default=None,
    help="Only with / only without the dynamic batcher (default: search both).",
)
@click.option("--queue-delays-us", help="max_queue_delay_microseconds range LOW:HIGH (log scale), e.g. 100:10000.")
@click.option("--preferred-batch-sizes", help="Choices among none,max,pow2 (default: none,pow2).")
@click.option(
    "--instance-counts",
    help="Instance counts, e.g. 1,2,3 (default: up to the CPU cores, at least 4, or 4 per GPU for GPU instances).",
)
@click.option("--instance-kinds", help="Instance kinds cpu,gpu (default: both where a GPU exists and it applies).")
@click.option(
    "--precisions",
    help="Precisions, e.g. fp32,fp16 (default: per backend; TensorRT: the engines of --trt-engines).",
)
@click.option("--trt-engines", help="TensorRT engine per precision, e.g. fp32=model.plan,fp16=model_fp16.plan.")
@click.option(
    "--composing-models",
    help="A python (BLS) model's pipeline: the models it calls, searched jointly with it and measured through it"
    " (an ensemble's steps are read from its config).",
)
@click.option("--dry-run", is_flag=True, help="Print the space and the candidates, validated; no server, no writes.")
@click.option(
    "--assume-gpu", is_flag=True, help="With --dry-run: plan for a server with one GPU (--gpus 0,1: with those)."
)
@click.option(
    "--precision-parameter", help="Config parameter holding precision for other backends (default precision)."
)
@click.option(
    "--load",
    "load_mode",
    type=click.Choice(["concurrency", "rate", "trace"]),
    default=None,
    help="How each trial offers load. Default: rate (open loop: the figure is the highest sustainable arrival"
    " rate; its claims agree with an independent re-measurement), but concurrency for a decoupled model (its"
    " streams outlast an open-loop window). concurrency: closed loop, clients in lockstep. trace: --trace FILE"
    " replayed faster or slower (the highest sustainable mean rate).",
)
@click.option(
    "--trace",
    "trace_file",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    help="With --load trace: a JSONL trace (perfkit profile --trace's format); sessions are kept.",
)
@click.option(
    "--arrival", type=click.Choice(["poisson", "constant"]), default=None, help="With --load rate (default poisson)."
)
@click.option("--max-rate", type=float, default=None, help="With --load rate: highest rate tried, req/s (20000).")
@click.option(
    "--confirm",
    "confirm_repeats",
    type=int,
    default=None,
    help="Re-measure the pick and its nearest rivals in N longer runs before claiming it (default 3; 0: off).",
)
@click.option(
    "--confirm-time",
    default=None,
    help="Each confirmation run lasts at least this long, e.g. 5s (default 5s: one perf_analyzer window).",
)
@click.option(
    "--max-concurrency",
    type=int,
    default=None,
    help="Closed loop (--load concurrency; a decoupled model's default): highest concurrency tried per trial"
    " (default 64).",
)
@click.option("--measurement-interval", type=float, default=None, help="Window length in ms (default 800).")
@click.option("--space-file", type=click.Path(path_type=Path), help="Sweep file (TOML) whose [tune] table sets these.")
@click.option("-i", "--protocol", type=click.Choice(["http", "grpc"]), default=None, help="Default: http.")
@click.option("-u", "--url", help="A running Triton (explicit model control) to tune on; needs --model-repository.")
@click.option(
    "--report",
    "report_path",
    type=click.Path(path_type=Path),
    help="Also write the HTML tune report here (e.g. DIR/report.html).",
)
@click.option(
    "--ray",
    "ray_address",
    default=None,
    metavar="ADDRESS|auto",
    help="Tune on a Ray cluster: one worker per server (each launches its own), all sharing one study.",
)
@click.option("--tune-workers", type=int, default=None, help="With --ray: tuning workers (default: one per node).")
@click.option(
    "--gpus-per-worker", type=float, default=0.0, show_default=True, help="With --ray: GPUs Ray gives each worker."
)
@server_options()
def command(  # noqa: PLR0917
    models: tuple[str, ...],
    mix_text: str | None,
    latency_budget: str,
    percentile: float,
    trials: int | None,
    max_time: str | None,
    output_dir: Path | None,
    resume: bool,
    storage: str | None,
    study_name: str | None,
    apply: bool,
    objective: str | None,
    seed: int | None,
    sampler: str,
    search_kind: str | None,
    min_throughput: float | None,
    max_gpu_memory: str | None,
    max_output_diff: str | None,
    max_batch_sizes: str | None,
    max_batch_size_limit: int | None,
    dynamic_batching: bool | None,
    queue_delays_us: str | None,
    preferred_batch_sizes: str | None,
    instance_counts: str | None,
    instance_kinds: str | None,
    precisions: str | None,
    trt_engines: str | None,
    dry_run: bool,
    assume_gpu: bool,
    precision_parameter: str | None,
    goodput_slos: str | None,
    load_mode: str | None,
    trace_file: Path | None,
    arrival: str | None,
    max_rate: float | None,
    confirm_repeats: int | None,
    confirm_time: str | None,
    max_concurrency: int | None,
    measurement_interval: float | None,
    space_file: Path | None,
    protocol: str | None,
    url: str | None,
    report_path: Path | None,
    ray_address: str | None = None,
    tune_workers: int | None = None,
    gpus_per_worker: float = 0.0,
    composing_models: str | None = None,
    **kwargs: Any,
) -> None:
    """Search configs of one model (or of several sharing a server, under a traffic mix) for the most
    throughput within a latency budget.

    Searches max_batch_size, dynamic batching (queue delay, preferred batch sizes), instance
    count (and kind) and precision; reloads the model for each candidate; always puts your
    config.pbtxt back. Example:

        perfkit tune -m batcher --model-repository models --latency-budget 20ms --trials 20

        perfkit tune -m batcher -m hungry --mix batcher:3,hungry:1 --latency-budget batcher:20ms,hungry:50ms
    """
    table = _read_tune_table(space_file) if space_file else {}
    flags: dict[str, Any] = {
        "max_batch_sizes": max_batch_sizes,
        "dynamic_batching": dynamic_batching,
        "queue_delays_us": queue_delays_us,
        "preferred_batch_sizes": preferred_batch_sizes,
        "instance_counts": instance_counts,
        "instance_kinds": instance_kinds,
        "precisions": precisions,
        "precision_parameter": precision_parameter,
        "max_batch_size_limit": max_batch_size_limit,
        "trt_engines": trt_engines,
    }
    merged = {**table, **{k: v for k, v in flags.items() if v is not None}}
    source = f"{space_file} [tune]" if space_file else "flags"
    space = TuneSpace.from_mapping(merged, source=source, ignore=SETTINGS_KEYS)
    mix = _mix_settings(models, mix_text, latency_budget, dry_run=dry_run, ray_address=ray_address,
                        composing_models=composing_models, load_mode=load_mode)  # fmt: skip
    model = models[0]
    if mix:
        budget_metric, budget_ms = "latency", mix["mix_budgets_ms"][0][1]
    else:
        budget_metric, budget_ms = parse_latency_budget(latency_budget)
    if assume_gpu and not dry_run:
        raise UsageError("--assume-gpu plans a server: use it with --dry-run")
    composing = _tune_pipeline.parse_composing(composing_models)
    pipeline = bool(composing) or is_pipeline(kwargs.get("model_repository"), model)
    if dry_run and pipeline:
        _tune_pipeline.dry_run(model, space, kwargs.get("model_repository"), composing, latency_budget_ms=budget_ms,
                               gpus=_planned_gpus(kwargs.get("gpus"), assume_gpu), output_dir=output_dir)  # fmt: skip
        return
    if dry_run:
        _dry_run(
            model,
            space,
            kwargs.get("model_repository"),
            latency_budget_ms=budget_ms,
            budget_metric=budget_metric,
            gpus=_planned_gpus(kwargs.get("gpus"), assume_gpu),
            output_dir=output_dir,
        )
        return
    overrides: dict[str, Any] = {
        "latency_budget_ms": budget_ms,
        "budget_metric": budget_metric,
        "percentile": percentile,
        **mix,
    }
    for key, value in (
        ("objective", objective),
        ("seed", seed),
        ("min_throughput", min_throughput),
        ("max_concurrency", max_concurrency),
        ("measurement_interval_ms", measurement_interval),
        ("protocol", protocol),
        ("trials", trials),
        ("sampler", sampler),
        ("search", search_kind),
        ("load", load_mode),
        ("trace", trace_file),
        ("arrival", arrival),
        ("max_rate_rps", max_rate),
        ("confirm_repeats", confirm_repeats),
    ):
        if value is not None:
            overrides[key] = value
    if goodput_slos is not None:
        from perfkit.measure import parse_goodput

        overrides["goodput_slo_ms"] = parse_goodput(goodput_slos)
    if max_time is not None:
        overrides["max_time_s"] = parse_duration_s(max_time, default_unit="s", what="--max-time")
    if confirm_time is not None:
        overrides["confirm_time_s"] = parse_duration_s(confirm_time, default_unit="s", what="--confirm-time")
    if max_gpu_memory is not None:
        overrides["max_gpu_memory_bytes"] = parse_bytes(max_gpu_memory)
    if max_output_diff is not None:
        overrides["max_output_diff"] = parse_max_output_diff(max_output_diff)
    if (
        "trials" not in overrides
        and "trials" not in table
        and "max_time_s" not in overrides
        and "max_time" not in table
    ):
        overrides["trials"] = 20
    elif "trials" not in overrides and "trials" not in table:
        overrides["trials"] = None
    settings = TuneSettings.from_mapping(
        model,
        {k: v for k, v in table.items() if k in SETTINGS_KEYS},
        source=source,
        output_dir=output_dir,
        storage=storage,
        study_name=study_name,
        resume=resume,
        apply=apply,
        command=("perfkit", *sys.argv[1:]) if sys.argv else (),
        **overrides,
    )
    opts = build_server_options(kwargs, url=url, models=(*models, *composing))
    if opts.model_repository is None:
        raise UsageError(
            "perfkit tune needs --model-repository DIR: the folder holding the model's config.pbtxt",
            hint="for -u URL, the folder that server reads (started with --model-control-mode=explicit)",
        )
    if mix:
        out = _tune_pipeline.run_mix(opts, settings, space)
        if report_path is not None:
            from perfkit.report import load_inputs, write_tune_report

            runs, tunes = load_inputs([out])
            write_tune_report(tunes[0], report_path, runs)
            click.echo(f"perfkit: tune report written to {report_path}", err=True)
        return
    if pipeline:
        if ray_address:
            raise UsageError("--ray tunes one model; tune a pipeline on one server (drop --ray)")
        out = _tune_pipeline.run(opts, settings, space, composing)
        if report_path is not None:
            from perfkit.report import load_inputs, write_tune_report

            runs, tunes = load_inputs([out])
            write_tune_report(tunes[0], report_path, runs)
            click.echo(f"perfkit: tune report written to {report_path}", err=True)
        return
    if ray_address:
        last_ok = _tune_on_ray(opts, settings, space, ray_address, tune_workers, gpus_per_worker)
        if report_path is not None:
            from perfkit.report import load_inputs, write_tune_report

            runs, tunes = load_inputs([last_ok])
            write_tune_report(tunes[0], report_path, runs)
            click.echo(f"perfkit: tune report written to {report_path}", err=True)
        return
    if tune_workers is not None:
        raise UsageError("--tune-workers places workers on a Ray cluster: give --ray ADDRESS|auto too")
    click.echo(f"perfkit: starting {opts.mode} Triton server ..." if opts.mode != "remote" else "", err=True, nl=False)
    with open_server(opts) as server:
        if opts.mode != "remote":
            click.echo(f" ready at {server.endpoints.http_url}", err=True)
        result = tune(server, settings, space, model_repository=opts.model_repository, on_event=_echo_event)
    if report_path is not None:
        from perfkit.report import load_inputs, write_tune_report

        runs, tunes = load_inputs([result.output_dir])
        write_tune_report(tunes[0], report_path, runs)
        click.echo(f"perfkit: tune report written to {report_path}", err=True)


def _mix_settings(
    models: tuple[str, ...],
    mix_text: str | None,
    latency_budget: str,
    *,
    dry_run: bool,
    ray_address: str | None,
    composing_models: str | None,
    load_mode: str | None,
) -> dict[str, Any]:
    """The settings of a traffic mix (several -m): the mix and each model's budget; {} for one model.
    Raises UsageError for a bad --mix or budget, or an option a mix cannot take."""
    from perfkit.measure import parse_mix
    from perfkit.tuner import parse_mix_budgets

    mix = parse_mix(models, mix_text)
    if not mix:
        return {}
    for given, flag in ((dry_run, "--dry-run"), (ray_address, "--ray"), (composing_models, "--composing-models"),
                        (load_mode == "trace", "--load trace")):  # fmt: skip
        if given:
            raise UsageError(
                f"{flag} is not supported when tuning a traffic mix ({', '.join(models)})",
                hint="tune the mix without it, or each model on its own",
            )
    budgets = parse_mix_budgets([m for m, _ in mix], latency_budget)
    return {"mix": mix, "mix_budgets_ms": tuple((m, budgets[m]) for m, _ in mix)}


def _tune_on_ray(
    opts: Any, settings: TuneSettings, space: TuneSpace, address: str, workers: int | None, gpus: float
) -> Path:
    """Run tune --ray and print each worker's outcome; returns the output folder of the last worker
    to finish well (its tune.json holds every trial of the shared study). Raises MeasurementError
    when every worker failed."""
    from perfkit.errors import MeasurementError
    from perfkit.tuner import tune_on_ray

    click.echo(
        f"perfkit: tuning {settings.model} on Ray ({address}): one server per worker, one shared study", err=True
    )
    out_dir, outcomes = tune_on_ray(opts, settings, space, address=address, workers=workers, gpus_per_worker=gpus)
    for o in outcomes:
        click.echo(
            f"  worker {o.worker} on {o.host}: {o.status}, {o.trials_here} trial(s) measured here, {o.output_dir}"
            + (f" ({o.error})" if o.error else "")
        )
    ok = [o for o in outcomes if o.status == "ok"]
    if ok:
        for line in ok[-1].log_tail[-4:]:
            click.echo(line)
    click.echo(f"results in {out_dir} (one folder per worker)")
    if not ok:
        raise MeasurementError("every tuning worker failed", hint="see each worker's error above")
    return Path(ok[-1].output_dir)

"""The options of `perfkit tune`, in one block (as _server_options holds the launch options): the
search's settings, its space, the target (-m, --mix, --composing-models) and --ray placement. The
command hands them to the tuner's settings parser as a mapping (SETTINGS_FLAGS, SPACE_FLAGS). A tune
setting's option is generated from its declaration on TuneSettings (tuner/_settings.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from perfkit.tuner import TUNE_SETTINGS, TuneSpace

F = TypeVar("F", bound=Callable[..., Any])

_DECLARED = {s.key: s for s in TUNE_SETTINGS if s.flags and s.key is not None}
# The settings given as flags, each under its declared key (its click parameter), as the settings
# parser takes them (TuneSettings.from_mapping's `flags`); --latency-budget is parse_budget's.
SETTINGS_FLAGS = tuple(_DECLARED)
# Flag parameters of the search space: TuneSpace.from_mapping's keys, one list (TuneSpace.KEYS) that the
# sweep file's [tune] table and the flags share; each flag's parameter is named as its key.
SPACE_FLAGS = TuneSpace.KEYS


_placed: set[str] = set()  # the settings whose option _OPTIONS places


def _setting(key: str) -> Callable[[F], F]:
    """The option of a declared tune setting: its flags, type and help, its default shown once (from
    the declaration). Its own default is None, so that a flag not given leaves the [tune] table's."""
    s = _DECLARED[key]
    _placed.add(key)
    kind: Any = s.kind.flag_type
    if s.choices:
        kind = click.Choice(list(s.choices))
    elif kind is Path:
        kind = click.Path(path_type=Path, exists=True, dir_okay=False)
    shown = s.shown_default()
    # Written into the help as click shows a default (show_default would print a text one in parentheses).
    text = f"{s.help}  [default: {shown}]" if shown else s.help
    return click.option(*s.flags, key, type=kind, default=None, required=s.required, help=text)


_OPTIONS = [
    click.option(
        "-m",
        "--model",
        "models",
        required=True,
        multiple=True,
        help="Model to tune (its folder in the model repository). Repeat it to tune models sharing the server"
        " jointly, under the traffic mix --mix gives.",
    ),
    click.option(
        "--mix",
        "mix_text",
        default=None,
        metavar="MODEL:WEIGHT,...",
        help="With several -m: the traffic mix each trial is measured at (model_a:3,model_b:1); default equal weights.",
    ),
    _setting("latency_budget"),
    _setting("percentile"),
    _setting("max_error_rate"),
    _setting("trials"),
    _setting("max_time"),
    click.option("-o", "--output-dir", type=click.Path(path_type=Path), help="Default: runs/tune-<model>-<timestamp>."),
    click.option("--resume", is_flag=True, help="Continue an interrupted study (same -o DIR or --storage)."),
    click.option("--storage", help="Optuna storage URL (default sqlite:///DIR/study.db; postgresql://... to share)."),
    click.option("--study-name", help="Study name (default tune-<model>); naming one joins it if it exists."),
    click.option("--apply", is_flag=True, help="Write the best config into the repository (backup kept)."),
    click.option(
        "--apply-via",
        type=click.Choice(["file", "api"]),
        default=None,
        help="How candidates reach the server: file (rewrite config.pbtxt in --model-repository; the default with one)"
        " or api (load each as a config override through the server's API, writing nothing; the default for -u"
        " without --model-repository; --apply is refused).",
    ),
    _setting("objective"),
    _setting("goodput"),
    _setting("seed"),
    _setting("sampler"),
    _setting("search"),
    _setting("min_throughput"),
    _setting("max_gpu_memory"),
    _setting("max_output_diff"),
    click.option(
        "--max-batch-sizes",
        help="max_batch_size values, e.g. 1,2,4,8 (default: powers of 2 up to 128, or the model's own for TensorRT).",
    ),
    click.option("--max-batch-size-limit", type=int, help="Highest max_batch_size explored by default (default 128)."),
    click.option(
        "--dynamic-batching/--no-dynamic-batching",
        default=None,
        help="Only with / only without the dynamic batcher (default: search both).",
    ),
    click.option("--queue-delays-us", help="max_queue_delay_microseconds range LOW:HIGH (log scale), e.g. 100:10000."),
    click.option("--preferred-batch-sizes", help="Choices among none,max,pow2 (default: none,pow2)."),
    click.option(
        "--max-queue-sizes",
        help="Queue policy bounds, e.g. 0,8,16 (0: unbounded; default: 0 and 1, 2, 4, 8 batches; needs"
        " --max-error-rate above 0).",
    ),
    click.option(
        "--queue-timeouts",
        help="Queue timeouts, e.g. none,reject:5000,delay:10000 (default: none, REJECT at a quarter and a half"
        " of the budget, DELAY at half; needs --max-error-rate above 0).",
    ),
    click.option(
        "--instance-counts",
        help="Instance counts, e.g. 1,2,3 (default: up to the CPU cores, at least 4, or 4 per GPU for GPU instances).",
    ),
    click.option("--instance-kinds", help="Instance kinds cpu,gpu (default: both where a GPU exists and it applies)."),
    click.option(
        "--precisions",
        help="Precisions, e.g. fp32,fp16 (default: per backend; TensorRT: the engines of --trt-engines).",
    ),
    click.option(
        "--intra-op-threads", help="A backend's intra-op thread counts, e.g. 1,2 (default: t x instances <= cores)."
    ),
    click.option(
        "--inter-op-threads", help="Inter-op thread counts, e.g. 1,2 (ONNX Runtime parallel mode; same default)."
    ),
    click.option(
        "--fix",
        help="Hold knobs at one value, e.g. sequence_strategy=oldest,max_candidate_sequences=8"
        " (the original's value is still trial 0; --dry-run lists the knobs).",
    ),
    click.option(
        "--rate-limit-priorities",
        help="Traffic mix: rate limiter priorities of each model's claim on the shared device, e.g. 0,1,4"
        " (0: no claim; default 0,1,2,4; the server runs with --rate-limit execution_count).",
    ),
    click.option("--trt-engines", help="TensorRT engine per precision, e.g. fp32=model.plan,fp16=model_fp16.plan."),
    click.option(
        "--parameter",
        "parameters",
        multiple=True,
        metavar="KEY=V1,V2,...",
        callback=lambda ctx, param, value: value or None,  # not given: the [tune] table's (or none)
        help="A config.pbtxt parameters entry and the values to search, e.g. kv_cache_free_gpu_mem_fraction=0.5,0.9"
        " (TensorRT-LLM's engine settings, a python model's own); repeat it for more keys, searched together.",
    ),
    click.option(
        "--composing-models",
        help="A python (BLS) model's pipeline: the models it calls, searched jointly with it and measured through it"
        " (an ensemble's steps are read from its config).",
    ),
    click.option(
        "--dry-run", is_flag=True, help="Print the space and the candidates, validated; no server, no writes."
    ),
    click.option(
        "--assume-gpu", is_flag=True, help="With --dry-run: plan for a server with one GPU (--gpus 0,1: with those)."
    ),
    click.option(
        "--precision-parameter", help="Config parameter holding precision for other backends (default precision)."
    ),
    _setting("load"),
    _setting("trace"),
    _setting("arrival"),
    _setting("max_rate"),
    _setting("confirm"),
    _setting("confirm_time"),
    _setting("max_concurrency"),
    _setting("measurement_interval_ms"),
    click.option(
        "--space-file", type=click.Path(path_type=Path), help="Sweep file (TOML) whose [tune] table sets these."
    ),
    _setting("protocol"),
    click.option(
        "-u",
        "--url",
        help="A running Triton (explicit model control) to tune on (without --model-repository: via its API).",
    ),
    click.option(
        "--report",
        "report_path",
        type=click.Path(path_type=Path),
        help="Also write the HTML tune report here (e.g. DIR/report.html).",
    ),
    click.option(
        "--ray",
        "ray_address",
        default=None,
        metavar="ADDRESS|auto",
        help="Tune on a Ray cluster: one worker per server (each launches its own), all sharing one study.",
    ),
    click.option("--tune-workers", type=int, default=None, help="With --ray: tuning workers (default: one per node)."),
    click.option(
        "--gpus-per-worker", type=float, default=0.0, show_default=True, help="With --ray: GPUs Ray gives each worker."
    ),
]

# A declared setting _OPTIONS does not place comes last in --help: declaring it is enough.
_OPTIONS += [_setting(key) for key in _DECLARED if key not in _placed]


def tune_options(fn: F) -> F:
    """Add every option of `perfkit tune` but the launch options (in --help in this order)."""
    for option in reversed(_OPTIONS):
        fn = option(fn)
    return fn

"""The options of `perfkit tune`, in one block (as _server_options holds the launch options): the
search's settings, its space, the target (-m, --mix, --composing-models) and --ray placement. The
command hands them to the tuner's settings parser as a mapping (SETTINGS_FLAGS, SPACE_FLAGS)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from perfkit import objectives
from perfkit.tuner import TuneSpace

F = TypeVar("F", bound=Callable[..., Any])

# Flag parameter -> key of the settings parser (TuneSettings.from_mapping's table keys and FLAG_KEYS).
SETTINGS_FLAGS = {
    "percentile": "percentile",
    "trials": "trials",
    "max_time": "max_time",
    "objective": "objective",
    "seed": "seed",
    "min_throughput": "min_throughput",
    "max_gpu_memory": "max_gpu_memory",
    "max_concurrency": "max_concurrency",
    "measurement_interval": "measurement_interval_ms",
    "protocol": "protocol",
    "sampler": "sampler",
    "search_kind": "search",
    "max_output_diff": "max_output_diff",
    "load_mode": "load",
    "arrival": "arrival",
    "confirm_repeats": "confirm",
    "confirm_time": "confirm_time",
    "goodput_slos": "goodput",
    "trace_file": "trace",
    "max_rate": "max_rate",
}
# Flag parameters of the search space: TuneSpace.from_mapping's keys, one list (TuneSpace.KEYS) that the
# sweep file's [tune] table and the flags share; each flag's parameter is named as its key.
SPACE_FLAGS = TuneSpace.KEYS

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
    click.option(
        "--latency-budget",
        required=True,
        help="Budget for the percentile: end-to-end latency (20ms, 0.5s, 800us), or for a decoupled model"
        " time to first token (ttft:300ms) or inter-token latency (itl:20ms). With several -m: each model's"
        " (model_a:20ms,model_b:50ms), or one for all.",
    ),
    click.option("--percentile", type=float, default=99.0, show_default=True, help="Percentile held to the budget."),
    click.option("--trials", type=int, default=None, help="Trials in the study (default 20; counts resumed ones)."),
    click.option("--max-time", default=None, help="Bound the whole tune, e.g. 10m (trials stop in time to confirm)."),
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
    click.option(
        "--objective",
        type=click.Choice(list(objectives.NAMES)),
        default=None,
        help="Default: throughput (within the budget). per-instance / per-gpu: throughput over the instances or GPUs"
        " the config occupies; goodput: streamed requests meeting every --goodput SLO per second (decoupled models);"
        " pareto: throughput and latency.",
    ),
    click.option("--goodput", "goodput_slos", help="With --objective goodput: the SLOs, e.g. ttft:200ms,itl:20ms."),
    click.option("--seed", type=int, default=None, help="Sampler seed (default 0)."),
    click.option(
        "--sampler",
        type=click.Choice(["auto", "grid", "random"]),
        default="auto",
        show_default=True,
        help="auto: TPE (NSGA-II for pareto); grid: every point (ranges at 4 log-spaced values); random.",
    ),
    click.option(
        "--search",
        "search_kind",
        type=click.Choice(["auto", "measure", "predict"]),
        default=None,
        help="predict: calibrate on the server, predict every config, measure the best predicted (the measured"
        " search takes over where predictions miss); measure: every trial measured; auto (default): predict where"
        " the prediction applies (one model or an ensemble, open-loop rates, a latency budget, the batching and"
        " instance knobs), else measure, saying why.",
    ),
    click.option("--min-throughput", type=float, help="Constraint: infer/s at least this."),
    click.option("--max-gpu-memory", help="Constraint: GPU memory used at most this, e.g. 8GiB."),
    click.option(
        "--max-output-diff",
        help="Accuracy guard: how far a candidate's outputs may differ from the original config's on the same "
        "inputs: a relative difference (1e-3), abs=X,rel=Y, or off. Default by output datatype: FP32 2e-3, "
        "FP16/BF16 1e-2, integers and strings exact.",
    ),
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
        "--instance-counts",
        help="Instance counts, e.g. 1,2,3 (default: up to the CPU cores, at least 4, or 4 per GPU for GPU instances).",
    ),
    click.option("--instance-kinds", help="Instance kinds cpu,gpu (default: both where a GPU exists and it applies)."),
    click.option(
        "--precisions",
        help="Precisions, e.g. fp32,fp16 (default: per backend; TensorRT: the engines of --trt-engines).",
    ),
    click.option("--trt-engines", help="TensorRT engine per precision, e.g. fp32=model.plan,fp16=model_fp16.plan."),
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
    click.option(
        "--load",
        "load_mode",
        type=click.Choice(["concurrency", "rate", "trace"]),
        default=None,
        help="How each trial offers load. Default: rate (open loop: the figure is the highest sustainable arrival"
        " rate; its claims agree with an independent re-measurement), but concurrency for a decoupled model (its"
        " streams outlast an open-loop window). concurrency: closed loop, clients in lockstep. trace: --trace FILE"
        " replayed faster or slower (the highest sustainable mean rate).",
    ),
    click.option(
        "--trace",
        "trace_file",
        type=click.Path(path_type=Path, exists=True, dir_okay=False),
        help="With --load trace: a JSONL trace (perfkit profile --trace's format); sessions are kept.",
    ),
    click.option(
        "--arrival",
        type=click.Choice(["poisson", "constant"]),
        default=None,
        help="With --load rate (default poisson).",
    ),
    click.option("--max-rate", type=float, default=None, help="With --load rate: highest rate tried, req/s (20000)."),
    click.option(
        "--confirm",
        "confirm_repeats",
        type=int,
        default=None,
        help="Re-measure the pick and its nearest rivals in N longer runs before claiming it (default 3; 0: off).",
    ),
    click.option(
        "--confirm-time",
        default=None,
        help="Each confirmation run lasts at least this long, e.g. 5s (default 5s: one perf_analyzer window).",
    ),
    click.option(
        "--max-concurrency",
        type=int,
        default=None,
        help="Closed loop (--load concurrency; a decoupled model's default): highest concurrency tried per trial"
        " (default 64).",
    ),
    click.option("--measurement-interval", type=float, default=None, help="Window length in ms (default 800)."),
    click.option(
        "--space-file", type=click.Path(path_type=Path), help="Sweep file (TOML) whose [tune] table sets these."
    ),
    click.option("-i", "--protocol", type=click.Choice(["http", "grpc"]), default=None, help="Default: http."),
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


def tune_options(fn: F) -> F:
    """Add every option of `perfkit tune` but the launch options (in --help in this order)."""
    for option in reversed(_OPTIONS):
        fn = option(fn)
    return fn

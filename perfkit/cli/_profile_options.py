"""`perfkit profile`'s options, and the ProfileSpec they build (perf_analyzer's flags, perfkit's names).

The flags' defaults are ProfileSpec's (defined once, on the record): the Python API, sweep
files and this command measure alike.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from perfkit.cli._metrics_options import metrics_options
from perfkit.cli._openai_options import openai_options, openai_spec_fields
from perfkit.cli._pa_compat import input_data_sources, pa_options, pa_spec_fields
from perfkit.cli._pa_tls import tls_options
from perfkit.cli._request_parameters import (
    admission_options,
    read_request_parameters,
    request_parameter_option,
    with_admission,
)
from perfkit.cli._server_options import server_options
from perfkit.cli._streaming_options import streaming_options, streaming_spec_fields
from perfkit.errors import UsageError
from perfkit.records import DEFAULT_BURST_OFF_MS, DEFAULT_BURST_ON_MS, LoadLevel, ProfileSpec, TlsSpec, spec_defaults
from perfkit.schedule import check_bursts

_D = spec_defaults()
F = TypeVar("F", bound=Callable[..., Any])


def _range(text: str, *, integer: bool, flag: str) -> list[float]:
    parts = text.split(":")
    try:
        nums = [float(p) for p in parts if p != ""]
    except ValueError:
        raise UsageError(f"{flag} {text!r}: expected start[:end[:step]] numbers") from None
    if not nums or len(parts) > 3:
        raise UsageError(f"{flag} {text!r}: expected start[:end[:step]]")
    start = nums[0]
    end = nums[1] if len(nums) > 1 else start
    step = nums[2] if len(nums) > 2 else (1.0 if integer else max(start, 1.0))
    if start <= 0 or end < start or step <= 0:
        raise UsageError(f"{flag} {text!r}: need 0 < start <= end and step > 0")
    values = []
    v = start
    while v <= end + 1e-9:
        values.append(round(v) if integer else v)
        v += step
    return values


def _shapes(items: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    shapes = {}
    for item in items:
        name, sep, dims = item.rpartition(":")
        try:
            shapes[name] = tuple(int(d) for d in dims.split(","))
        except ValueError:
            raise UsageError(f"--shape {item!r}: expected NAME:D1,D2,... with integer dims") from None
        if not sep or not name:
            raise UsageError(f"--shape {item!r}: expected NAME:D1,D2,...")
    return shapes


def build_levels(
    concurrency_range: str | None,
    request_rate_range: str | None,
    distribution: str,
    request_intervals: Path | None,
    *,
    burst_on_ms: float | None = None,
    burst_off_ms: float | None = None,
) -> tuple[LoadLevel, ...]:
    """Load levels from perf_analyzer's range flags; raises UsageError."""
    given = sum(x is not None for x in (concurrency_range, request_rate_range, request_intervals))
    if given > 1:
        raise UsageError("give only one of --concurrency-range, --request-rate-range, --request-intervals")
    check_bursts(distribution, burst_on_ms, burst_off_ms, flag="--request-distribution")
    if distribution == "onoff" and not request_rate_range:
        raise UsageError("--request-distribution onoff: needs --request-rate-range (the mean rate of the bursts)")
    if request_rate_range:
        rates = _range(request_rate_range, integer=False, flag="--request-rate-range")
        dist: Any = distribution  # from click.Choice(constant, poisson, onoff): a records.Distribution
        return tuple(LoadLevel("request_rate", r, dist, burst_on_ms, burst_off_ms) for r in rates)
    if request_intervals:
        return (LoadLevel("custom_intervals", 0.0),)
    values = _range(concurrency_range or "1", integer=True, flag="--concurrency-range")
    return tuple(LoadLevel("concurrency", c) for c in values)


def _percentiles(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise UsageError(f"--tail-percentiles {text!r}: expected comma-separated numbers, e.g. 99,99.9") from None
    if not all(0 < p < 100 for p in values):
        raise UsageError(f"--tail-percentiles {text!r}: each must lie between 0 and 100")
    return values


def _check_request_count(spec: ProfileSpec, count: int) -> None:
    """--request-count's rules beyond perf_analyzer's own (one load value, no fewer requests than it: checked
    with the other perf_analyzer rules before click parses, perfkit/cli/_flag_checks.py)."""
    if spec.binary_search or spec.trace or spec.fixed_schedule:
        raise UsageError(f"--request-count {count}: not with --binary-search, --fixed-schedule or a trace")


def _fleet_urls(values: tuple[str, ...]) -> list[str]:
    """-u values: URLs, comma lists, or @FILE with one URL a line ('#' comments); raises InputError."""
    from perfkit.errors import InputError

    urls: list[str] = []
    for value in values:
        if value.startswith("@"):
            path = Path(value[1:])
            try:
                lines = path.read_text().splitlines()
            except OSError as err:
                raise InputError(f"-u {value}: cannot read the URL file ({err.strerror})") from None
            found = [ln.split("#", 1)[0].strip() for ln in lines]
            found = [u for u in found if u]
            if not found:
                raise InputError(f"-u {value}: the file lists no server URL")
            urls.extend(found)
        else:
            urls.extend(u.strip() for u in value.split(",") if u.strip())
    return urls


def build_spec(
    kw: dict[str, Any],
    *,
    model: str,
    mix: tuple[tuple[str, int], ...],
    request_count: int,
    tls: TlsSpec | None,
) -> ProfileSpec:
    """The ProfileSpec the parsed flags ask for; raises UsageError naming the flag."""
    return ProfileSpec(
        model=model,
        mix=mix,
        model_version=kw["model_version"],
        protocol=kw["protocol"],
        levels=build_levels(
            kw["concurrency_range"],
            kw["request_rate_range"],
            kw["request_distribution"],
            kw["request_intervals"],
            burst_on_ms=kw["burst_on_ms"],
            burst_off_ms=kw["burst_off_ms"],
        ),
        batch_size=kw["batch_size"],
        input_data=input_data_sources(kw["input_data"]) or _D["input_data"],
        shapes=_shapes(kw["shapes"]),
        string_length=kw["string_length"],
        repeat_fraction=kw["repeat_fraction"],
        shared_memory=kw["shared_memory"],
        output_shared_memory_size=kw["output_shared_memory_size"],
        measurement_interval_ms=kw["measurement_interval"],
        stability_percentage=kw["stability_percentage"],
        max_trials=kw["max_trials"],
        min_windows=kw["min_windows"],
        level_budget_s=kw["level_budget_s"],
        percentile=kw["percentile"],
        latency_threshold_ms=kw["latency_threshold"],
        binary_search=kw["binary_search"],
        warmup_request_count=kw["warmup_request_count"],
        request_count=request_count,
        warmup_s=kw["warmup_s"],
        collect_metrics=kw["collect_metrics"],
        metrics_url=kw["metrics_url"],
        metrics_interval_ms=kw["metrics_interval"],
        request_intervals_file=str(kw["request_intervals"]) if kw["request_intervals"] else None,
        seed=kw["seed"],
        workers=kw["workers"],
        max_outstanding=kw["max_outstanding"],
        tail_percentiles=_percentiles(kw["tail_percentiles"]),
        **streaming_spec_fields(kw),
        **openai_spec_fields(kw),
        **pa_spec_fields(kw),
        request_parameters=with_admission(
            read_request_parameters(kw["request_parameters"]), kw["request_priority"], kw["request_timeout_us"]
        ),
        tls=tls,
    )


def profile_options(f: F) -> F:
    """Every option of `perfkit profile`, in the order its --help lists them."""
    for option in reversed(_OPTIONS):
        f = option(f)
    return f


_OPTIONS: list[Callable[[Any], Any]] = [
    metrics_options,
    click.option(
        "-m",
        "--model-name",
        "model",
        required=True,
        multiple=True,
        help="Model to measure. Repeat it to load several models at once, in the traffic mix --mix gives.",
    ),
    click.option(
        "--mix",
        default=None,
        metavar="MODEL:WEIGHT,...",
        help="With several -m: the traffic mix (model_a:3,model_b:1), each request drawn for a model by weight,"
        " exactly over every cycle of the weights' sum. Default: equal weights.",
    ),
    click.option("-x", "--model-version", default="", help="Model version (default: the server's choice)."),
    click.option(
        "-u",
        "--url",
        "urls",
        multiple=True,
        help="URL of a running server (host:port for the protocol given by -i). With --ray: repeat it, give a comma"
        " list, or @FILE (one URL a line) to spread load over a fleet of servers.",
    ),
    click.option("-i", "--protocol", type=click.Choice(["http", "grpc"]), default=_D["protocol"], show_default=True),
    click.option(
        "--admin-url", default=None, help="HTTP URL for metadata/statistics with -i grpc -u (default: port-1)."
    ),
    click.option("-b", "--batch-size", type=int, default=_D["batch_size"], show_default=True),
    click.option("--concurrency-range", default=None, help="start[:end[:step]] requests in flight (closed loop)."),
    click.option("--request-rate-range", default=None, help="start[:end[:step]] requests/s (open loop)."),
    click.option(
        "--request-distribution",
        type=click.Choice(["constant", "poisson", "onoff"]),
        default="constant",
        help="Arrivals of --request-rate-range: constant, poisson, or onoff (bursts: evenly spaced sends for"
        " --burst-on-ms, none for --burst-off-ms, the rate being the mean over the cycle).",
    ),
    click.option(
        "--burst-on-ms",
        type=float,
        default=None,
        help=f"With onoff: how long each burst sends (default {DEFAULT_BURST_ON_MS:g}).",
    ),
    click.option(
        "--burst-off-ms",
        type=float,
        default=None,
        help=f"With onoff: the quiet gap after each burst (default {DEFAULT_BURST_OFF_MS:g}).",
    ),
    click.option("--request-intervals", type=click.Path(path_type=Path), help="File of gaps in us, one per line."),
    click.option(
        "--input-data",
        multiple=True,
        help=f"zero, random (default: {_D['input_data']}), a JSON data file or a directory (one file per input);"
        " repeat it to append the streams of several, as perf_analyzer does.",
    ),
    click.option(
        "--repeat-fraction",
        type=float,
        default=_D["repeat_fraction"],
        show_default=True,
        help="Of generated random inputs, the fraction of requests that repeat an earlier request's inputs (what"
        " Triton's response cache can hit); the record states the fraction sent. 0: one input sent every time.",
    ),
    click.option("--shape", "shapes", multiple=True, help="NAME:D1,D2 for inputs with variable dims (repeatable)."),
    click.option(
        "--string-length", type=int, default=_D["string_length"], show_default=True, help="Length of random BYTES data."
    ),
    click.option(
        "--shared-memory", type=click.Choice(["none", "system", "cuda"]), default=_D["shared_memory"], show_default=True
    ),
    click.option("--output-shared-memory-size", type=int, default=_D["output_shared_memory_size"], show_default=True),
    click.option(
        "-p",
        "--measurement-interval",
        type=float,
        default=_D["measurement_interval_ms"],
        show_default=True,
        help="Window length in ms (perf_analyzer's default is 5000).",
    ),
    click.option(
        "-s",
        "--stability-percentage",
        type=float,
        default=_D["stability_percentage"],
        show_default=True,
        help="Target ~95%% CI half-width: throughput within half of it, the latency statistic within it.",
    ),
    click.option(
        "-r",
        "--max-trials",
        type=int,
        default=_D["max_trials"],
        show_default=True,
        help="Max windows per level (a precise level stops earlier; perf_analyzer's default is 10 of 5 s).",
    ),
    click.option("--min-windows", type=int, default=_D["min_windows"], show_default=True),
    click.option(
        "--level-budget",
        "level_budget_s",
        type=float,
        default=_D["level_budget_s"],
        metavar="SECONDS",
        help="Seconds of windows after which a level not yet precise ends, flagged unstable, once its tail"
        " percentiles have their samples. Default: 10 windows' worth (perf_analyzer's worst case at the same -p);"
        " 0: windows until -r.",
    ),
    click.option("--percentile", type=float, default=None, help="Latency percentile for stability and thresholds."),
    click.option(
        "--tail-percentiles",
        default=",".join(f"{p:g}" for p in _D["tail_percentiles"]),
        show_default=True,
        help="Percentiles a level must have enough samples beyond before it stops (default: those `perfkit gate` "
        "judges by default); '' for none.",
    ),
    click.option("-l", "--latency-threshold", type=float, default=None, help="Stop past this latency (ms)."),
    click.option(
        "--binary-search", is_flag=True, help="With -l: binary-search the range for the highest level within it."
    ),
    click.option("--warmup-request-count", type=int, default=_D["warmup_request_count"], show_default=True),
    click.option(
        "--request-count",
        type=click.IntRange(min=1),
        default=None,
        help="Measure one window of exactly N requests (one concurrency or rate value), not windows until stable.",
    ),
    click.option(
        "--warmup", "warmup_s", type=float, default=_D["warmup_s"], show_default=True, help="Warm-up seconds per level."
    ),
    click.option(
        "-f", "--latency-report-file", "csv_path", type=click.Path(path_type=Path), help="perf_analyzer-format CSV."
    ),
    click.option(
        "--collect-metrics", is_flag=True, help="Sample the server's GPU metrics (and pynvml) during the run."
    ),
    click.option("--metrics-url", default=None, help="Metrics endpoint (default: the server's)."),
    click.option(
        "--metrics-interval",
        type=float,
        default=_D["metrics_interval_ms"],
        show_default=True,
        help="ms between scrapes.",
    ),
    click.option(
        "-o", "--output", type=click.Path(path_type=Path), help="Run record (JSON). Default: runs/<model>-<time>.json"
    ),
    click.option("--report", "report_path", type=click.Path(path_type=Path), help="Also write an HTML report here."),
    click.option("--workers", type=int, default=_D["workers"], show_default=True, help="Load-generator processes."),
    click.option(
        "--max-outstanding",
        type=int,
        default=_D["max_outstanding"],
        show_default=True,
        help="Open loop: requests in flight beyond which sends count as dropped.",
    ),
    click.option(
        "--seed", type=int, default=_D["seed"], show_default=True, help="Seed for random data and Poisson gaps."
    ),
    click.option("--model", "serve_models", multiple=True, help="Models a launched server loads (default: all)."),
    click.option(
        "--ray",
        "ray_address",
        default=None,
        metavar="ADDRESS|auto",
        help="Place the load workers on this Ray cluster ('auto': the one"
        " this host belongs to); results merge exactly.",
    ),
    click.option(
        "--client-hosts", type=int, default=None, help="With --ray: load workers to place (default: one per node)."
    ),
    click.option(
        "--client-resource",
        default=None,
        metavar="NAME",
        help="With --ray: place workers only on nodes offering this custom resource (ray start --resources).",
    ),
    streaming_options(),
    openai_options(),
    pa_options(),
    request_parameter_option(),
    *admission_options(),
    tls_options(),
    server_options(),
]

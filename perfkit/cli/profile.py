"""`perfkit profile`: perf_analyzer's flags, perfkit's measurements."""

from __future__ import annotations

import dataclasses
import datetime as dt
import sys
from pathlib import Path
from typing import Any

import click

from perfkit.cli._metrics_options import metrics_options, publish
from perfkit.cli._pa_compat import (
    PaCompatCommand,
    input_data_sources,
    pa_options,
    pa_spec_fields,
    unstable_exit,
)
from perfkit.cli._pa_tls import tls_options, tls_specs
from perfkit.cli._server_options import build_server_options, server_options
from perfkit.cli._streaming_options import streaming_lines, streaming_options, streaming_spec_fields
from perfkit.errors import MeasurementError, UsageError
from perfkit.measure import LevelDone, LevelStarted, ProgressEvent, WindowMeasured, WorkersPlaced
from perfkit.records import LevelResult, LoadLevel, ProfileSpec, RunRecord, spec_defaults
from perfkit.server.launch import open_server
from perfkit.server.remote import parse_host_port

# The flags' defaults are ProfileSpec's (defined once, on the record): the Python API, sweep
# files and this command measure alike.
_D = spec_defaults()


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
    concurrency_range: str | None, request_rate_range: str | None, distribution: str, request_intervals: Path | None
) -> tuple[LoadLevel, ...]:
    """Load levels from perf_analyzer's range flags; raises UsageError."""
    given = sum(x is not None for x in (concurrency_range, request_rate_range, request_intervals))
    if given > 1:
        raise UsageError("give only one of --concurrency-range, --request-rate-range, --request-intervals")
    if request_rate_range:
        rates = _range(request_rate_range, integer=False, flag="--request-rate-range")
        return tuple(LoadLevel("request_rate", r, distribution) for r in rates)  # type: ignore[arg-type]  # distribution comes from click.Choice(constant, poisson)
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


def _fmt_ms(us: float) -> str:
    return f"{us / 1e3:.2f}"


def summary_table(record: RunRecord) -> str:
    """The terminal summary: one row per level, latency kind stated."""
    lines = []
    open_loop = any(lv.corrected is not None for lv in record.levels)
    head = f"{'load':>18} {'infer/s':>10} {'p50 ms':>8} {'p90 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'avg ms':>8}"
    head += f" {'errors':>7} {'±tput':>6} {'±lat':>6}  stable"
    if open_loop:
        head += "   sent/s  late  dropped"
    lines.append(head)
    for lv in record.levels:
        lat = lv.latency()
        p = lv.precision
        row = (
            f"{lv.load.label:>18} {lv.throughput_infer_per_s:>10,.1f} {_fmt_ms(lat.p50_us):>8} "
            f"{_fmt_ms(lat.p90_us):>8} {_fmt_ms(lat.p95_us):>8} {_fmt_ms(lat.p99_us):>8} {_fmt_ms(lat.mean_us):>8}"
            f" {lv.error_count:>7} {_pct(p.throughput_rel):>6} {_pct(p.latency_rel):>6}  {'yes' if lv.stable else 'NO'}"
        )
        if open_loop:
            row += f" {lv.sent_rps:>8.1f} {lv.late_count:>5} {lv.dropped_count:>8}"
        lines.append(row)
        if lat.thin:
            lines.append(f"{'':>18} (too few samples for {', '.join(lat.thin)})")
        for share in lv.models:  # a traffic mix: each model's figures under the whole mix's
            r, m_lat = share.result, share.result.latency()
            lines.append(
                f"{'  ' + share.model + ' (' + str(share.weight) + ')':>18} {r.throughput_infer_per_s:>10,.1f} "
                f"{_fmt_ms(m_lat.p50_us):>8} {_fmt_ms(m_lat.p90_us):>8} {_fmt_ms(m_lat.p95_us):>8} "
                f"{_fmt_ms(m_lat.p99_us):>8} {_fmt_ms(m_lat.mean_us):>8} {r.error_count:>7}"
                f"  requests {r.request_count}"
            )
    kind = "corrected (from due time)" if open_loop else "service (from send time)"
    lines.append(f"latency: {kind}; ±: ~95% CI half-width, relative")
    if record.spec.mix:
        lines.append(f"traffic mix {record.spec.mix_label}: each level's first row is the whole mix, then each model")
    lines.extend(streaming_lines(record))
    for lv in record.levels:
        if lv.corrected is not None:
            s = lv.service
            lines.append(
                f"  {lv.load.label}: service p50 {_fmt_ms(s.p50_us)} ms, p99 {_fmt_ms(s.p99_us)} ms"
                f"; send lateness p99 {(lv.send_lateness_p99_us or 0) / 1e3:.3f} ms"
            )
        if lv.errors:
            lines.append(f"  {lv.load.label}: errors {lv.errors} {lv.note}")
        lines.extend(_fleet_lines(lv))
        if lv.reconnects:
            lines.append(f"  {lv.load.label}: {lv.reconnects} connection(s) died and were replaced during the level")
        servers = [("", lv.server)] + [(f" {sh.model}", sh.result.server) for sh in lv.models]
        for who, s2 in servers:
            if s2 is None:
                continue
            batches = ", ".join(f"{k}×{v}" for k, v in s2.batch_sizes.items())
            lines.append(
                f"  {lv.load.label}:{who} server queue {_fmt_ms(s2.queue_avg_us)} ms,"
                f" infer {_fmt_ms(s2.compute_infer_avg_us)} ms, input {_fmt_ms(s2.compute_input_avg_us)} ms,"
                f" output {_fmt_ms(s2.compute_output_avg_us)} ms;"
                f" batches formed {batches or '-'}"
            )
    return "\n".join(lines)


def _fleet_lines(lv: LevelResult) -> list[str]:
    """Distributed runs: each server's share of a fleet, and each load worker's."""
    lines = []
    for s in lv.fleet:
        lat = s.corrected or s.service
        lines.append(
            f"  {lv.load.label}: server {s.url}: {s.throughput_infer_per_s:,.1f} infer/s,"
            f" p50 {_fmt_ms(lat.p50_us)} ms, p99 {_fmt_ms(lat.p99_us)} ms, {s.request_count} requests,"
            f" {s.error_count} errors"
        )
    for w in lv.workers:
        lines.append(
            f"  {lv.load.label}: worker {w.worker} {w.status}: {w.request_count} requests, {w.late_count} late,"
            f" {w.dropped_count} dropped; clock offset {w.clock_offset_ns / 1e3:+.1f} us"
            f" ± {w.clock_uncertainty_ns / 1e3:.1f} us"
        )
    if lv.incomplete:
        lines.append(f"  {lv.load.label}: INCOMPLETE: {lv.note}")
    return lines


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"


class _Progress:
    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()

    def __call__(self, ev: ProgressEvent) -> None:
        publish(ev)  # live metrics (--metrics-port), when serving
        if isinstance(ev, WorkersPlaced):  # distributed runs: where the load workers were placed
            for w in ev.workers:
                click.echo(f"  worker {w.worker}: {w.host} (Ray node {w.node_id[:12]})", err=True)
        elif isinstance(ev, LevelStarted):
            click.echo(f"perfkit: measuring {ev.level.label} ...", err=True)
        elif isinstance(ev, WindowMeasured):
            p = ev.precision
            text = (
                f"  window {ev.window:>2}: {ev.infer_per_s:>10,.1f} infer/s  p99 {ev.p99_us / 1e3:.2f} ms"
                f"  ±tput {_pct(p.throughput_rel)}  ±lat {_pct(p.latency_rel)}"
            )
            click.echo(("\r" + text) if self.tty else text, err=True, nl=not self.tty)
        elif isinstance(ev, LevelDone):
            r = ev.result
            if self.tty:
                click.echo("", err=True)
            click.echo(
                f"  -> {r.throughput_infer_per_s:,.1f} infer/s, p99 {r.latency().p99_us / 1e3:.2f} ms,"
                f" {'stable' if r.stable else 'UNSTABLE'} after {len(r.windows)} windows",
                err=True,
            )
            if r.drift is not None:
                click.echo(f"  {r.note.split('; ')[0]}", err=True)


@click.command(name="profile", cls=PaCompatCommand)
@metrics_options
@click.option(
    "-m",
    "--model-name",
    "model",
    required=True,
    multiple=True,
    help="Model to measure. Repeat it to load several models at once, in the traffic mix --mix gives.",
)
@click.option(
    "--mix",
    default=None,
    metavar="MODEL:WEIGHT,...",
    help="With several -m: the traffic mix (batcher:3,hungry:1), each request drawn for a model by weight,"
    " exactly over every cycle of the weights' sum. Default: equal weights.",
)
@click.option("-x", "--model-version", default="", help="Model version (default: the server's choice).")
@click.option(
    "-u",
    "--url",
    "urls",
    multiple=True,
    help="URL of a running server (host:port for the protocol given by -i). With --ray: repeat it, give a comma"
    " list, or @FILE (one URL a line) to spread load over a fleet of servers.",
)
@click.option("-i", "--protocol", type=click.Choice(["http", "grpc"]), default=_D["protocol"], show_default=True)
@click.option("--admin-url", default=None, help="HTTP URL for metadata/statistics with -i grpc -u (default: port-1).")
@click.option("-b", "--batch-size", type=int, default=_D["batch_size"], show_default=True)
@click.option("--concurrency-range", default=None, help="start[:end[:step]] requests in flight (closed loop).")
@click.option("--request-rate-range", default=None, help="start[:end[:step]] requests/s (open loop).")
@click.option("--request-distribution", type=click.Choice(["constant", "poisson"]), default="constant")
@click.option("--request-intervals", type=click.Path(path_type=Path), help="File of gaps in us, one per line.")
@click.option(
    "--input-data",
    multiple=True,
    help=f"zero, random (default: {_D['input_data']}), a JSON data file or a directory (one file per input);"
    " repeat it to append the streams of several, as perf_analyzer does.",
)
@click.option("--shape", "shapes", multiple=True, help="NAME:D1,D2 for inputs with variable dims (repeatable).")
@click.option(
    "--string-length", type=int, default=_D["string_length"], show_default=True, help="Length of random BYTES data."
)
@click.option(
    "--shared-memory", type=click.Choice(["none", "system", "cuda"]), default=_D["shared_memory"], show_default=True
)
@click.option("--output-shared-memory-size", type=int, default=_D["output_shared_memory_size"], show_default=True)
@click.option(
    "-p",
    "--measurement-interval",
    type=float,
    default=_D["measurement_interval_ms"],
    show_default=True,
    help="Window length in ms (perf_analyzer's default is 5000).",
)
@click.option(
    "-s",
    "--stability-percentage",
    type=float,
    default=_D["stability_percentage"],
    show_default=True,
    help="Target ~95%% CI half-width: throughput within half of it, the latency statistic within it.",
)
@click.option(
    "-r",
    "--max-trials",
    type=int,
    default=_D["max_trials"],
    show_default=True,
    help="Max windows per level (a precise level stops earlier; perf_analyzer's default is 10 of 5 s).",
)
@click.option("--min-windows", type=int, default=_D["min_windows"], show_default=True)
@click.option(
    "--level-budget",
    "level_budget_s",
    type=float,
    default=_D["level_budget_s"],
    metavar="SECONDS",
    help="Seconds of windows after which a level not yet precise ends, flagged unstable, once its tail"
    " percentiles have their samples. Default: 10 windows' worth (perf_analyzer's worst case at the same -p);"
    " 0: windows until -r.",
)
@click.option("--percentile", type=float, default=None, help="Latency percentile for stability and thresholds.")
@click.option(
    "--tail-percentiles",
    default=",".join(f"{p:g}" for p in _D["tail_percentiles"]),
    show_default=True,
    help="Percentiles a level must have enough samples beyond before it stops (default: those `perfkit gate` "
    "judges by default); '' for none.",
)
@click.option("-l", "--latency-threshold", type=float, default=None, help="Stop past this latency (ms).")
@click.option("--binary-search", is_flag=True, help="With -l: binary-search the range for the highest level within it.")
@click.option("--warmup-request-count", type=int, default=_D["warmup_request_count"], show_default=True)
@click.option(
    "--request-count",
    type=click.IntRange(min=1),
    default=None,
    help="Measure one window of exactly N requests (one concurrency or rate value), not windows until stable.",
)
@click.option(
    "--warmup", "warmup_s", type=float, default=_D["warmup_s"], show_default=True, help="Warm-up seconds per level."
)
@click.option(
    "-f", "--latency-report-file", "csv_path", type=click.Path(path_type=Path), help="perf_analyzer-format CSV."
)
@click.option("--collect-metrics", is_flag=True, help="Sample the server's GPU metrics (and pynvml) during the run.")
@click.option("--metrics-url", default=None, help="Metrics endpoint (default: the server's).")
@click.option(
    "--metrics-interval", type=float, default=_D["metrics_interval_ms"], show_default=True, help="ms between scrapes."
)
@click.option(
    "-o", "--output", type=click.Path(path_type=Path), help="Run record (JSON). Default: runs/<model>-<time>.json"
)
@click.option("--report", "report_path", type=click.Path(path_type=Path), help="Also write an HTML report here.")
@click.option("--workers", type=int, default=_D["workers"], show_default=True, help="Load-generator processes.")
@click.option(
    "--max-outstanding",
    type=int,
    default=_D["max_outstanding"],
    show_default=True,
    help="Open loop: requests in flight beyond which sends count as dropped.",
)
@click.option("--seed", type=int, default=_D["seed"], show_default=True, help="Seed for random data and Poisson gaps.")
@click.option("--model", "serve_models", multiple=True, help="Models a launched server loads (default: all).")
@click.option(
    "--ray",
    "ray_address",
    default=None,
    metavar="ADDRESS|auto",
    help="Place the load workers on this Ray cluster ('auto': the one this host belongs to); results merge exactly.",
)
@click.option(
    "--client-hosts", type=int, default=None, help="With --ray: load workers to place (default: one per node)."
)
@click.option(
    "--client-resource",
    default=None,
    metavar="NAME",
    help="With --ray: place workers only on nodes offering this custom resource (ray start --resources).",
)
@streaming_options()
@pa_options()
@tls_options()
@server_options()
def command(**kw: Any) -> int:
    """Measure throughput and latency of a model under load, like perf_analyzer.

    Launches the bundled Triton on --model-repository (default fixtures/models) unless
    -u points at a running server. The run record is saved before anything is summarized.

    \b
    Examples:
      perfkit profile -m identity --concurrency-range 1:4:1
      perfkit profile -m sleeper --request-rate-range 50:150:50 --request-distribution poisson
      perfkit profile -m identity -u localhost:8001 -i grpc -f out.csv
      perfkit profile -m identity --ray auto --client-hosts 4 -u gpu1:8000,gpu2:8000
      perfkit profile -m batcher -m hungry --mix batcher:3,hungry:1 --request-rate-range 40
    """
    from perfkit.measure import parse_mix

    models = tuple(kw.pop("model"))
    mix = parse_mix(models, kw.pop("mix"))
    urls = _fleet_urls(kw.pop("urls"))
    ray_address, client_hosts = kw.pop("ray_address"), kw.pop("client_hosts")
    client_resource = kw.pop("client_resource")
    if len(urls) > 1 and not ray_address:
        raise UsageError("several -u servers (a fleet) need --ray ADDRESS|auto to drive them")
    if mix and ray_address:
        raise UsageError("a traffic mix (several -m) is drawn by one engine on this machine; drop --ray")
    if (client_hosts is not None or client_resource) and not ray_address:
        raise UsageError("--client-hosts places workers on a Ray cluster: give --ray ADDRESS|auto too")
    url = urls[0] if urls else None
    protocol = kw["protocol"]
    grpc_url = http_url = None
    engine_tls, admin_tls = tls_specs(kw, url=url, admin_url=kw["admin_url"], protocol=protocol)
    if engine_tls is not None and ray_address:
        raise UsageError("TLS (--ssl-* flags, an https:// URL) is not carried to --ray workers; drop one of them")
    if url and protocol == "grpc":
        host, port = parse_host_port(url)
        grpc_url = url
        http_url = kw.pop("admin_url") or f"{host}:{port - 1}"
    else:
        http_url = url
        kw.pop("admin_url")
    if kw["model_repository"] is None and not url and (kw["launch_mode"] in (None, "local")):
        kw["model_repository"] = Path("fixtures/models")
    serve_models = tuple(kw.pop("serve_models")) or None
    request_count = kw.pop("request_count") or 0
    opts = build_server_options(kw, url=http_url, grpc_url=grpc_url, metrics_url=kw["metrics_url"], models=serve_models)
    opts = dataclasses.replace(opts, tls=admin_tls)
    spec = ProfileSpec(
        model=models[0],
        mix=mix,
        model_version=kw["model_version"],
        protocol=protocol,
        levels=build_levels(
            kw["concurrency_range"], kw["request_rate_range"], kw["request_distribution"], kw["request_intervals"]
        ),
        batch_size=kw["batch_size"],
        input_data=input_data_sources(kw["input_data"]) or _D["input_data"],
        shapes=_shapes(kw["shapes"]),
        string_length=kw["string_length"],
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
        **pa_spec_fields(kw),
        tls=engine_tls,
    )
    if request_count:
        _check_request_count(spec, request_count)
        if ray_address:
            raise UsageError("--request-count measures in one process; drop --ray (or the count)")
    if ray_address and (spec.periodic_concurrency or spec.measurement_mode == "count_windows"):
        raise UsageError("--ray measures time windows: drop --periodic-concurrency-range / count_windows (or --ray)")
    name = "+".join(m for m, _ in spec.mix) if spec.mix else spec.model
    out = kw["output"] or Path("runs") / f"{name}-{dt.datetime.now():%Y%m%d-%H%M%S}.json"
    if ray_address:
        record = run_profile_ray(
            opts, spec, out, kw["csv_path"], kw["report_path"], ray_address, client_hosts, urls[1:], client_resource
        )
        return unstable_exit(record)
    return unstable_exit(run_profile(opts, spec, out, kw["csv_path"], kw["report_path"]))


def _check_request_count(spec: ProfileSpec, count: int) -> None:
    """perf_analyzer's rules for --request-count: one load value, no fewer requests than it."""
    if len(spec.levels) != 1:
        raise UsageError(f"--request-count {count}: not supported with several load values in one run")
    if count < spec.levels[0].value:
        raise UsageError(f"--request-count {count} can not be less than {spec.levels[0].label}")
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


def run_profile_ray(
    opts: Any,
    spec: ProfileSpec,
    out: Path,
    csv_path: Path | None,
    report_path: Path | None,
    address: str,
    client_hosts: int | None,
    more_urls: list[str],
    client_resource: str | None = None,
) -> RunRecord:
    """Like run_profile, with the load workers on a Ray cluster and a fleet of servers; raises like it."""
    from perfkit.distributed import alive_nodes, connect, profile_distributed
    from perfkit.server.remote import attach_remote

    ray = connect(address)
    nodes = alive_nodes(ray)
    if client_resource:
        nodes = [n for n in nodes if float(n.get("Resources", {}).get(client_resource, 0)) > 0]
    hosts = client_hosts if client_hosts is not None else max(1, len(nodes))
    if opts.mode != "remote":
        click.echo(f"perfkit: starting {opts.mode} Triton server on {opts.model_repository} ...", err=True)
    with open_server(opts) as server:
        fleet = [server]
        for u in more_urls:
            grpc_url = None
            if spec.protocol == "grpc":
                host, port = parse_host_port(u)
                grpc_url, u = u, f"{host}:{port - 1}"
            fleet.append(attach_remote(u, grpc_url=grpc_url))
        click.echo(f"perfkit: {hosts} load worker(s) on Ray ({address}), {len(fleet)} server(s)", err=True)
        try:
            record = profile_distributed(
                fleet,
                spec,
                address=address,
                client_hosts=hosts,
                node_resource=client_resource,
                command=tuple(sys.argv),
                on_progress=_Progress(),
                record_path=out,
            )
        except MeasurementError as err:
            if isinstance(err.record, RunRecord):
                click.echo(summary_table(err.record))
            click.echo(f"perfkit: partial run record saved to {out}", err=True)
            raise
    click.echo(summary_table(record))
    _extras(record, csv_path, report_path)
    click.echo(f"perfkit: run record saved to {out}", err=True)
    _fail_if_nothing_measured(record)
    return record


def run_profile(
    opts: Any, spec: ProfileSpec, out: Path, csv_path: Path | None, report_path: Path | None = None
) -> RunRecord:
    """Launch/attach, measure, save, summarize. Raises MeasurementError after saving a partial record."""
    from perfkit.measure import profile

    if opts.mode != "remote":
        click.echo(f"perfkit: starting {opts.mode} Triton server on {opts.model_repository} ...", err=True)
    with open_server(opts) as server:
        try:
            record = profile(server, spec, command=tuple(sys.argv), on_progress=_Progress(), record_path=out)
        except MeasurementError as err:
            if isinstance(err.record, RunRecord):
                click.echo(summary_table(err.record))
                _extras(err.record, csv_path, report_path)
            click.echo(f"perfkit: partial run record saved to {out}", err=True)
            raise
    click.echo(summary_table(record))
    _extras(record, csv_path, report_path)
    click.echo(f"perfkit: run record saved to {out}", err=True)
    _fail_if_nothing_measured(record)
    return record


def _fail_if_nothing_measured(record: RunRecord) -> None:
    from perfkit.measure import nothing_measured

    why = nothing_measured(record)
    if why:
        raise MeasurementError(why, hint="the run record is saved; its levels' notes show the errors").with_record(
            record
        )


def _extras(record: RunRecord, csv_path: Path | None, report_path: Path | None) -> None:
    from perfkit.measure import write_csv

    if csv_path:
        write_csv(record, csv_path)
        click.echo(f"perfkit: CSV written to {csv_path}", err=True)
    if report_path and record.levels:
        from perfkit.report import write_profile_report

        write_profile_report([record], report_path)
        click.echo(f"perfkit: report written to {report_path}", err=True)

"""`perfkit profile`: perf_analyzer's flags, perfkit's measurements.

The command parses its flags (perfkit/cli/_profile_options.py builds the ProfileSpec) and calls
run_profile, which measures through perfkit.measure.profile, or perfkit.distributed.profile_fleet
with --ray, then prints the summary.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import sys
from pathlib import Path
from typing import Any, NamedTuple

import click

from perfkit.cli._pa_compat import PaCompatCommand, unstable_exit
from perfkit.cli._pa_tls import tls_specs
from perfkit.cli._profile_options import _check_request_count, _fleet_urls, build_spec, profile_options
from perfkit.cli._profile_progress import ProfileProgress
from perfkit.cli._server_options import build_server_options
from perfkit.cli._stop_rule_option import stop_rule_of, stop_rule_option
from perfkit.errors import MeasurementError, UsageError
from perfkit.measure import summary_table
from perfkit.records import ProfileSpec, RunRecord
from perfkit.server.launch import open_server
from perfkit.server.remote import parse_host_port


class _Fleet(NamedTuple):
    """--ray: where the load workers go and which other servers take load."""

    address: str
    hosts: int
    more_urls: tuple[str, ...]
    client_resource: str | None


@click.command(name="profile", cls=PaCompatCommand)
@profile_options
@stop_rule_option
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
      perfkit profile -m model_a -m model_b --mix model_a:3,model_b:1 --request-rate-range 40
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
    stop_rule = stop_rule_of(kw)
    spec = build_spec(kw, model=models[0], mix=mix, request_count=request_count, tls=engine_tls)
    spec = dataclasses.replace(spec, stop_rule=stop_rule)
    opts = dataclasses.replace(opts, tls=admin_tls, client_shm=spec.shared_memory != "none")
    if spec.service_kind == "openai":
        if ray_address or len(urls) != 1 or engine_tls is not None:
            raise UsageError(
                "--service-kind openai measures one server at -u HOST:PORT over plain HTTP from this machine",
                hint="give one -u (no --ray, no https://)",
            )
        if request_count:
            _check_request_count(spec, request_count)
        name = spec.model.replace("/", "_")
        out = kw["output"] or Path("runs") / f"{name}-{dt.datetime.now():%Y%m%d-%H%M%S}.json"
        return unstable_exit(run_openai_profile(url or "", spec, out, kw["csv_path"], kw["report_path"]))
    if request_count:
        _check_request_count(spec, request_count)
        if ray_address:
            raise UsageError("--request-count measures in one process; drop --ray (or the count)")
    if ray_address and (spec.periodic_concurrency or spec.measurement_mode == "count_windows"):
        raise UsageError("--ray measures time windows: drop --periodic-concurrency-range / count_windows (or --ray)")
    name = "+".join(m for m, _ in spec.mix) if spec.mix else spec.model
    out = kw["output"] or Path("runs") / f"{name}-{dt.datetime.now():%Y%m%d-%H%M%S}.json"
    fleet = None
    if ray_address:
        from perfkit.distributed import fleet_hosts  # Ray is imported only for a distributed run

        hosts = fleet_hosts(ray_address, client_hosts, client_resource)
        fleet = _Fleet(ray_address, hosts, tuple(urls[1:]), client_resource)
    return unstable_exit(run_profile(opts, spec, out, kw["csv_path"], kw["report_path"], fleet=fleet))


def run_profile(
    opts: Any,
    spec: ProfileSpec,
    out: Path,
    csv_path: Path | None,
    report_path: Path | None = None,
    *,
    fleet: _Fleet | None = None,
) -> RunRecord:
    """Launch/attach, measure (on a Ray fleet when given), save, summarize.

    Raises MeasurementError after saving a partial record.
    """
    if opts.mode != "remote":
        click.echo(f"perfkit: starting {opts.mode} Triton server on {opts.model_repository} ...", err=True)
        if spec.repeat_fraction > 0:  # stated repeats: a model enabling response_cache finds a cache
            opts = dataclasses.replace(opts, response_cache=True)
    with open_server(opts) as server:
        try:
            if fleet is None:
                from perfkit.measure import profile

                record = profile(server, spec, command=tuple(sys.argv), on_progress=ProfileProgress(), record_path=out)
            else:
                from perfkit.distributed import profile_fleet

                click.echo(
                    f"perfkit: {fleet.hosts} load worker(s) on Ray ({fleet.address}),"
                    f" {1 + len(fleet.more_urls)} server(s)",
                    err=True,
                )
                record = profile_fleet(
                    server,
                    spec,
                    address=fleet.address,
                    hosts=fleet.hosts,
                    more_urls=fleet.more_urls,
                    client_resource=fleet.client_resource,
                    command=tuple(sys.argv),
                    on_progress=ProfileProgress(),
                    record_path=out,
                )
        except MeasurementError as err:
            if isinstance(err.record, RunRecord):
                click.echo(summary_table(err.record))
                if fleet is None:
                    _extras(err.record, csv_path, report_path)
            click.echo(f"perfkit: partial run record saved to {out}", err=True)
            raise
    click.echo(summary_table(record))
    _extras(record, csv_path, report_path)
    click.echo(f"perfkit: run record saved to {out}", err=True)
    _fail_if_nothing_measured(record)
    return record


def run_openai_profile(
    url: str, spec: ProfileSpec, out: Path, csv_path: Path | None, report_path: Path | None
) -> RunRecord:
    """Measure an OpenAI-compatible server at url, save, summarize; raises MeasurementError (exit 5) when any
    request failed, saying the error rate, after saving the record."""
    from perfkit.measure import profile_openai
    from perfkit.server.openai import OpenAIServer

    host, port = parse_host_port(url.removeprefix("http://"))
    server = OpenAIServer(host, port)
    try:
        record = profile_openai(server, spec, command=tuple(sys.argv), on_progress=ProfileProgress(), record_path=out)
    except MeasurementError as err:
        if isinstance(err.record, RunRecord):
            click.echo(summary_table(err.record))
        click.echo(f"perfkit: partial run record saved to {out}", err=True)
        raise
    click.echo(summary_table(record))
    _extras(record, csv_path, report_path)
    click.echo(f"perfkit: run record saved to {out}", err=True)
    _fail_if_nothing_measured(record)
    _fail_if_requests_failed(record)
    return record


def _fail_if_requests_failed(record: RunRecord) -> None:
    """A run whose requests failed is no success (an OpenAI endpoint's: AIPerf exits 0 on a server's 500s)."""
    sent = sum(lv.request_count for lv in record.levels)
    failed = sum(lv.error_count for lv in record.levels)
    if failed:
        kinds = ", ".join(sorted({f"{k} ×{v}" for lv in record.levels for k, v in lv.errors.items()}))
        raise MeasurementError(
            f"{failed} of {sent} requests failed (error rate {failed / max(1, sent):.1%}: {kinds})",
            hint="the run record is saved; its levels' notes show the errors",
        ).with_record(record)


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

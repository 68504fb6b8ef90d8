"""`perfkit plan`: replicas for a target arrival rate within a latency budget, from a tune or
profile record; with servers (-u, several with --ray) it checks the plan by running them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from perfkit.capacity import (
    CapacityPlan,
    evidence_from_run,
    evidence_from_tune,
    judge_verification,
    plan_capacity,
    verification_spec,
)
from perfkit.errors import MeasurementError, UsageError
from perfkit.records import RunRecord, TuneRecord, load_record
from perfkit.units import parse_duration_s, parse_latency_ms, parse_percent, parse_rate_rps


def _read(path: Path) -> RunRecord | TuneRecord:
    return load_record(path / "tune.json" if path.is_dir() else path)


@click.command(name="plan")
@click.argument("record", type=click.Path(path_type=Path, exists=True))
@click.option("--target-rate", required=True, help="Arrival rate to carry, e.g. 20000/s or 20k/s.")
@click.option("--latency-budget", help="Budget for the percentile, e.g. 50ms (default: the tune record's).")
@click.option("--percentile", type=float, default=99.0, show_default=True, help="With a profile record.")
@click.option("--headroom", default="30%", show_default=True, help="Capacity kept spare above the target.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Also write the plan's JSON here.")
@click.option("--report", "report_path", type=click.Path(path_type=Path), help="Also write the plan's HTML page here.")
@click.option("-u", "--url", "urls", multiple=True, help="Check the plan on these servers (several need --ray).")
@click.option("--ray", "ray_address", metavar="ADDRESS|auto", help="Drive the fleet's load from a Ray cluster.")
@click.option("--duration", default="8s", show_default=True, help="How long the check runs.")
@click.option("-i", "--protocol", type=click.Choice(["http", "grpc"]), default="http", show_default=True)
def command(
    record: Path,
    target_rate: str,
    latency_budget: str | None,
    percentile: float,
    headroom: str,
    as_json: bool,
    output: Path | None,
    report_path: Path | None,
    urls: tuple[str, ...],
    ray_address: str | None,
    duration: str,
    protocol: str,
) -> None:
    """Replicas (servers or GPUs) needed for a target arrival rate within a latency budget.

    Reads a tune record (its confirmed recommendation and interval) or a profile run record (its
    highest level within the budget), and sizes the fleet on the interval's low end with
    headroom. With -u URL (one server, or several with --ray) it runs them at the target rate
    (their share of it) and says whether the plan held; a plan that did not hold exits 5.

        perfkit plan runs/tune-hungry/ --target-rate 20000/s --latency-budget 50ms --headroom 30%
    """
    target = parse_rate_rps(target_rate)
    room = parse_percent(headroom)
    budget_ms = parse_latency_ms(latency_budget) if latency_budget else None
    rec = _read(record)
    if isinstance(rec, TuneRecord):
        evidence, notes = evidence_from_tune(rec, latency_budget_ms=budget_ms, source=str(record))
    else:
        evidence, notes = evidence_from_run(rec, latency_budget_ms=budget_ms, percentile=percentile,
                                            source=str(record))  # fmt: skip
    the_plan = plan_capacity(evidence, target_rps=target, headroom=room, notes=notes)
    result = the_plan.to_json()
    if not as_json:
        for line in the_plan.lines():
            click.echo(line)
    ok = True
    if urls:
        ok, line = _verify(the_plan, list(urls), ray_address, parse_duration_s(duration, what="--duration"), protocol)
        result["verification"] = {"servers": len(urls), "held": ok, "line": line}
        if not as_json:
            click.echo(line)
    if as_json:
        click.echo(json.dumps(result, indent=2))
    if output is not None:
        output.write_text(json.dumps(result, indent=2) + "\n")
        click.echo(f"perfkit: plan written to {output}", err=True)
    if report_path is not None:
        from perfkit.report import write_plan_report

        write_plan_report(the_plan, report_path, result.get("verification"))
        click.echo(f"perfkit: plan report written to {report_path}", err=True)
    if not ok:
        raise MeasurementError("the fleet did not hold the plan", hint="see the verification line above")


def _verify(
    the_plan: CapacityPlan, urls: list[str], ray_address: str | None, duration_s: float, protocol: str
) -> tuple[bool, str]:
    from perfkit.server.remote import attach_remote

    if len(urls) > 1 and not ray_address:
        raise UsageError("several -u servers (a fleet) need --ray ADDRESS|auto to drive them")
    spec = verification_spec(the_plan, len(urls), duration_s=duration_s, protocol=protocol)
    click.echo(f"perfkit: checking the plan on {len(urls)} server(s) at {spec.levels[0].value:,.1f} req/s", err=True)
    servers = [attach_remote(u) for u in urls]
    try:
        if ray_address:
            from perfkit.distributed import profile_distributed

            rec = profile_distributed(servers, spec, address=ray_address, client_hosts=1, command=tuple(sys.argv))
        else:
            from perfkit.measure import profile

            rec = profile(servers[0], spec, command=tuple(sys.argv))
    except MeasurementError as err:
        if isinstance(err.record, RunRecord):
            return judge_verification(the_plan, err.record, len(urls))
        raise
    return judge_verification(the_plan, rec, len(urls))

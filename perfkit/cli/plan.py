"""`perfkit plan`: replicas for a target arrival rate within a latency budget, from a tune or
profile record; with servers (-u, several with --ray) it checks the plan by running them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from perfkit.capacity import (
    PlanAsk,
    check_plan,
    knob_choice,
    measured_plan,
    plan_json,
    predicted_plan,
    read_plan_record,
)
from perfkit.errors import MeasurementError, UsageError
from perfkit.records import TuneRecord
from perfkit.units import parse_latency_ms, parse_percent, parse_rate_rps


def _checking(servers: int, rate_rps: float) -> None:
    click.echo(f"perfkit: checking the plan on {servers} server(s) at {rate_rps:,.1f} req/s", err=True)


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
@click.option(
    "--predict",
    "predicted",
    is_flag=True,
    help="Also plan from a predicted rate (a tune record with a calibration: --search predict); with no knob "
    "flags, the best predicted config of the tuner's default space.",
)
@click.option("--max-batch-sizes", help="Predict these max_batch_size values, e.g. 64 or 16,32,64 (implies --predict).")
@click.option(
    "--dynamic-batching/--no-dynamic-batching", default=None, help="Predict with / without the dynamic batcher."
)
@click.option("--queue-delays-us", help="Predict these queue delays, e.g. 500, 0,500 or a range 100:10000.")
@click.option("--preferred-batch-sizes", help="Predict these preferred-size choices among none,max,pow2.")
@click.option("--instance-counts", help="Predict these instance counts, e.g. 2 or 1,2,4.")
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
    predicted: bool,
    max_batch_sizes: str | None,
    dynamic_batching: bool | None,
    queue_delays_us: str | None,
    preferred_batch_sizes: str | None,
    instance_counts: str | None,
) -> None:
    """Replicas (servers or GPUs) needed for a target arrival rate within a latency budget.

    Reads a tune record (its confirmed recommendation and interval) or a profile run record (its
    highest level within the budget), and sizes the fleet on the interval's low end with
    headroom. With -u URL (one server, or several with --ray) it runs them at the target rate
    (their share of it) and says whether the plan held; a plan that did not hold exits 5.

    With --predict (or any knob flag) and a tune record that carries a calibration (`perfkit tune
    --search predict`), it also sizes the fleet from the rate the batcher simulator predicts for a
    config never measured: the one the knob flags name (knobs not named stay at the original
    config's), or the best predicted of the tuner's default space; marked as predicted, with the
    range its calibration error spans, beside the measured plan.

        perfkit plan runs/tune-my_model/ --target-rate 20000/s --latency-budget 50ms --headroom 30%
        perfkit plan runs/tune-my_model/ --target-rate 20000/s --max-batch-sizes 64 --instance-counts 2
    """
    target_rps, room = parse_rate_rps(target_rate), parse_percent(headroom)
    budget_ms = parse_latency_ms(latency_budget) if latency_budget else None
    rec = read_plan_record(record)
    choice = knob_choice(
        max_batch_sizes=max_batch_sizes,
        dynamic_batching=dynamic_batching,
        queue_delays_us=queue_delays_us,
        preferred_batch_sizes=preferred_batch_sizes,
        instance_counts=instance_counts,
    )
    ask = PlanAsk(target_rps, room, budget_ms, percentile, choice, predicted)
    measured = measured_plan(rec, ask, source=str(record))
    if not as_json:
        for line in measured.lines():
            click.echo(line)
    pred = None
    if ask.wants_predicted:
        assert isinstance(rec, TuneRecord)  # measured_plan refused a profile record
        pred = predicted_plan(rec, ask)
        if not as_json:
            for line in pred.lines():
                click.echo(line)
    verification = None
    if urls:
        verification = check_plan(measured, list(urls), ray_address=ray_address, duration=duration, protocol=protocol,
                                  command=tuple(sys.argv), on_start=_checking)  # fmt: skip
        if not as_json:
            click.echo(verification.line)
    result = plan_json(ask, measured, pred, verification)
    if as_json:
        click.echo(json.dumps(result, indent=2))
    if output is not None:
        output.write_text(json.dumps(result, indent=2) + "\n")
        click.echo(f"perfkit: plan written to {output}", err=True)
    if report_path is not None:
        from perfkit.report import write_plan_report

        if measured.plan is None:
            raise UsageError("--report draws the measured plan, and there is none", hint="see the 'measured:' line")
        write_plan_report(measured.plan, report_path, result.get("verification"), pred)
        click.echo(f"perfkit: plan report written to {report_path}", err=True)
    if verification is not None and not verification.held:
        raise MeasurementError("the fleet did not hold the plan", hint="see the verification line above")

"""`perfkit plan`: replicas for a target arrival rate within a latency budget, from a tune or
profile record; with servers (-u, several with --ray) it checks the plan by running them."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from perfkit.capacity import (
    CapacityPlan,
    KnobChoice,
    PredictedPlan,
    evidence_from_run,
    evidence_from_tune,
    judge_verification,
    knob_choice,
    plan_capacity,
    plan_predicted,
    predict_evidence,
    verification_spec,
)
from perfkit.errors import InputError, MeasurementError, UsageError
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

        perfkit plan runs/tune-hungry/ --target-rate 20000/s --latency-budget 50ms --headroom 30%
        perfkit plan runs/tune-hungry/ --target-rate 20000/s --max-batch-sizes 64 --instance-counts 2
    """
    target = parse_rate_rps(target_rate)
    room = parse_percent(headroom)
    budget_ms = parse_latency_ms(latency_budget) if latency_budget else None
    rec = _read(record)
    choice = knob_choice(
        max_batch_sizes=max_batch_sizes,
        dynamic_batching=dynamic_batching,
        queue_delays_us=queue_delays_us,
        preferred_batch_sizes=preferred_batch_sizes,
        instance_counts=instance_counts,
    )
    want_predicted = predicted or choice.named
    if want_predicted and not isinstance(rec, TuneRecord):
        raise UsageError(f"{record}: --predict needs a tune record with a calibration, not a profile run record",
                         hint="tune with --search predict, then plan from its tune.json")  # fmt: skip
    the_plan: CapacityPlan | None = None
    result: dict[str, Any]
    try:
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
    except (InputError, UsageError) as err:
        if not want_predicted:
            raise
        # A config never measured is what a prediction is for: the measured plan's absence is stated.
        result = {"target_rps": target, "headroom": room, "replicas": None, "measured_error": err.message}
        if not as_json:
            click.echo(f"measured: no plan ({err.message})")
    pred: PredictedPlan | None = None
    if want_predicted:
        assert isinstance(rec, TuneRecord)
        pred = _predicted_plan(rec, choice, budget_ms, target, room)
        result["predicted"] = pred.to_json()
        if not as_json:
            for line in pred.lines():
                click.echo(line)
    ok = True
    if urls:
        if the_plan is None:
            raise UsageError("-u checks the measured plan, and there is none", hint="see the 'measured:' line above")
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

        if the_plan is None:
            raise UsageError("--report draws the measured plan, and there is none", hint="see the 'measured:' line")
        write_plan_report(the_plan, report_path, result.get("verification"), pred)
        click.echo(f"perfkit: plan report written to {report_path}", err=True)
    if not ok:
        raise MeasurementError("the fleet did not hold the plan", hint="see the verification line above")


def _predicted_plan(
    rec: TuneRecord, choice: KnobChoice, budget_ms: float | None, target: float, room: float
) -> PredictedPlan:
    budget = budget_ms if budget_ms is not None else rec.budget.latency_budget_ms
    return plan_predicted(predict_evidence(rec, choice, budget_ms=budget), target_rps=target, headroom=room)


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

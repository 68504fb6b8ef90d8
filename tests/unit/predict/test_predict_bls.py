"""The BLS simulator (perfkit.predict._bls through simulate_pipeline / pipeline_rate with a fan-out)
against closed forms: a request alone takes the BLS model's own time plus each call's execution
times its fan-out; the BLS instance is held through its calls, so one instance serves
1 / (own + sum of calls) requests a second and a deterministic BLS pipeline fed by Poisson arrivals
queues at its BLS model as M/D/1 does (Pollaczek-Khinchine's mean wait); more BLS instances
lift that ceiling until a called model, at its ceiling over its calls a request, bounds the rate;
and calls from several BLS instances meet in a called model's batcher. No server."""

from __future__ import annotations

import pytest

from perfkit.errors import UsageError
from perfkit.predict import BatcherConfig, Contention, PipelineStep, ServiceModel, pipeline_rate, simulate_pipeline
from perfkit.predict._pipeline import ceilings, floor_us

OWN = ServiceModel(1_000.0, 0.0)
# fixtures/models/stage_*: fixed_ms + per_item_ms * N under one lock per step (host_ms aside)
DECODE = ServiceModel(6_000.0, 200.0)
INFER = ServiceModel(6_000.0, 200.0)


def _steps(
    bls_instances: int = 1, infer: BatcherConfig | None = None, shared: float = 0.0, decode: BatcherConfig | None = None
) -> list[PipelineStep]:
    return [
        PipelineStep("bls", BatcherConfig(8, False, (), 0.0, bls_instances), OWN),
        PipelineStep("decode", decode or BatcherConfig(8), DECODE),
        PipelineStep("infer", infer or BatcherConfig(8), INFER, Contention(shared)),
    ]


@pytest.mark.parametrize("fanout", [(1, 1), (1, 2), (3, 0)])
def test_a_request_alone_takes_the_bls_models_own_time_plus_each_call_times_its_fan_out(fanout):
    alone_us = 1_000.0 + fanout[0] * 6_200.0 + fanout[1] * 6_200.0 + 500.0
    p = simulate_pipeline(_steps(), 5.0, overhead_us=500.0, arrival="constant", requests=400, fanout=fanout)
    assert p.end_to_end.p50_us == pytest.approx(alone_us) and p.end_to_end.p99_us == pytest.approx(alone_us)
    assert floor_us(_steps(), 500.0, fanout) == pytest.approx(alone_us)
    bls, decode, infer = p.steps
    # The BLS model's execution holds its instance through its calls, as Triton counts its compute time.
    assert bls.mean_exec_us == pytest.approx(alone_us - 500.0) and bls.mean_wait_us == pytest.approx(0.0)
    assert decode.mean_exec_us == pytest.approx(6_200.0 if fanout[0] else 0.0)
    assert infer.mean_exec_us == pytest.approx(6_200.0 if fanout[1] else 0.0)


def test_one_bls_instance_is_held_through_its_calls_so_it_bounds_the_rate_and_queues_as_md1():
    held_s = (1_000.0 + 6_200.0 + 2 * 6_200.0) / 1e6  # own + decode once + infer twice
    caps = ceilings(_steps(), (1, 2))
    assert caps[0] == pytest.approx(1 / held_s) and caps[0] < min(caps[1:])
    over = simulate_pipeline(_steps(), 3 / held_s, requests=2_000, fanout=(1, 2))
    assert over.end_to_end.completed_rps == pytest.approx(1 / held_s, rel=0.01)
    # Poisson arrivals at 60% of it: the calls never queue (one at a time), the BLS model queues as
    # M/D/1 with service held_s: mean wait rho * D / (2 (1 - rho)).
    rho = 0.6
    p = simulate_pipeline(_steps(), rho / held_s, requests=20_000, fanout=(1, 2))
    want_wait = rho * held_s / (2 * (1 - rho))
    assert p.steps[0].mean_wait_us / 1e6 == pytest.approx(want_wait, rel=0.08)
    assert p.steps[1].mean_wait_us == pytest.approx(0.0, abs=1e-3) and p.steps[2].mean_wait_us == pytest.approx(
        0.0, abs=1e-3
    )
    assert p.end_to_end.mean_us / 1e6 == pytest.approx(held_s + want_wait, rel=0.05)


def test_more_bls_instances_lift_the_rate_until_a_called_model_bounds_it_over_its_calls():
    budget_us = 500_000.0
    one = pipeline_rate(_steps(1), budget_us, fanout=(1, 2), requests=2_000)
    two = pipeline_rate(_steps(2), budget_us, fanout=(1, 2), requests=2_000)
    four = pipeline_rate(_steps(4), budget_us, fanout=(1, 2), requests=2_000)
    held_s = 19_600.0 / 1e6
    assert one.bottleneck == "bls" and 0.85 / held_s <= one.rate_rps <= 1.0 / held_s
    # infer's one instance: 1 / 6.2 ms executions a second, two a request
    infer_cap = 1e6 / 6_200.0 / 2
    assert two.bottleneck == four.bottleneck == "infer"
    assert 0.85 * infer_cap <= four.rate_rps <= 1.0 * infer_cap and one.rate_rps < two.rate_rps
    # two instances of infer on one device (shared fraction 1) are no faster than one
    shared = pipeline_rate(_steps(4, BatcherConfig(8, instances=2), shared=1.0), budget_us, fanout=(1, 2),
                           requests=2_000)  # fmt: skip
    assert shared.rate_rps == pytest.approx(four.rate_rps, rel=0.05)


def test_calls_from_several_bls_instances_meet_in_a_called_models_batcher():
    batched = BatcherConfig(8, True, (), 0.0)
    p = simulate_pipeline(_steps(8, batched, decode=batched), 250.0, requests=2_000, fanout=(1, 1))
    assert p.end_to_end.completed_rps == pytest.approx(250.0, rel=0.05)  # past one unbatched instance's 161
    for called in p.steps[1:]:
        assert 1.3 < called.mean_batch <= 8.0  # at most one call a BLS instance in its queue
    # one BLS instance: one call at a time, whatever the load
    alone = simulate_pipeline(_steps(1, batched, decode=batched), 200.0, requests=1_000, fanout=(1, 1))
    assert alone.steps[1].mean_batch == alone.steps[2].mean_batch == pytest.approx(1.0)


def test_a_fan_out_that_is_not_one_whole_number_per_called_model_is_refused():
    for bad in ((1,), (1, 1.5), (1, -1)):
        with pytest.raises(UsageError, match="fan-out"):
            simulate_pipeline(_steps(), 5.0, fanout=bad)

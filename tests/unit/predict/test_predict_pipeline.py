"""The pipeline simulator (steps in series and on parallel branches, each fed by the departures
of the steps it reads from) against closed forms and the single-step simulator: one step is the
single-step simulator exactly; a deterministic second step as slow as the first never queues (its
arrivals are spaced by the first's service), so the tandem is M/D/1 plus a constant and its
sustainable rate is Erlang's M/D/1 figure at the budget less that constant; the end-to-end
percentile is that of summed latencies, below the sum of each step's own percentile; and the
`stages` fixture's known service models (two batch-hungry steps: batching one alone gains
nothing). No server."""

from __future__ import annotations

import numpy as np
import pytest

from perfkit.errors import UsageError
from perfkit.predict import (
    BatcherConfig,
    Contention,
    Load,
    PipelineStep,
    ServiceModel,
    pipeline_rate,
    score_pipelines,
    simulate,
    simulate_pipeline,
    unit_arrivals,
)
from perfkit.predict._pipeline import step_departures
from tests.support.queueing import sustainable_rate_rps

D_US = 10_000.0
ONE = BatcherConfig()
# fixtures/models/stage_*: fixed_ms + per_item_ms * N under one lock per step (host_ms aside)
DECODE = ServiceModel(6_000.0, 200.0)
INFER = ServiceModel(6_000.0, 200.0)
POST = ServiceModel(300.0, 20.0)
BATCHED = BatcherConfig(8, True, (), 2_000.0)


def test_one_step_is_the_single_step_simulator_exactly():
    cfg, svc = BatcherConfig(8, True, (4,), 3_000.0, instances=2), ServiceModel(4_000.0, 500.0)
    unit = unit_arrivals("poisson", 4_000, seed=3)
    end, size = step_departures(unit / 400.0, cfg, svc, Contention(0.5))
    assert np.all(end > unit / 400.0) and set(size.tolist()) <= set(range(1, 9))
    one = simulate_pipeline([PipelineStep("m", cfg, svc, Contention(0.5))], 400.0, overhead_us=700.0, unit=unit)
    alone = simulate(cfg, ServiceModel(4_000.0, 500.0, 700.0), Load("poisson", 400.0), Contention(0.5), unit=unit)
    assert one.end_to_end.p99_us == pytest.approx(alone.p99_us)
    assert one.end_to_end.p50_us == pytest.approx(alone.p50_us)
    assert one.steps[0].mean_batch == pytest.approx(alone.mean_batch)


def test_a_second_deterministic_step_as_slow_never_queues_and_the_tandem_is_md1_plus_its_service():
    steps = [PipelineStep("a", ONE, ServiceModel(D_US, 0.0)), PipelineStep("b", ONE, ServiceModel(D_US, 0.0))]
    unit = unit_arrivals("poisson", 50_000, seed=1)
    rho = 0.7
    p = simulate_pipeline(steps, rho / (D_US / 1e6), unit=unit)
    assert p.steps[1].mean_wait_us == pytest.approx(0.0, abs=1e-6)
    # Pollaczek-Khinchine: the first step's mean wait rho D / (2 (1 - rho)); the second adds D.
    pk_us = rho * D_US / (2 * (1 - rho))
    assert p.steps[0].mean_wait_us == pytest.approx(pk_us, rel=0.09)
    assert p.end_to_end.mean_us == pytest.approx(pk_us + 2 * D_US, rel=0.05)
    alone = simulate(ONE, ServiceModel(D_US, 0.0), Load("poisson", rho / (D_US / 1e6)), unit=unit)
    assert p.end_to_end.p99_us == pytest.approx(alone.p99_us + D_US, rel=1e-9)
    # Summed per request, not summed percentiles: the second step on its own Poisson arrivals
    # would queue, and the sum of the two percentiles overstates the pipeline's.
    second = simulate(ONE, ServiceModel(D_US, 0.0), Load("poisson", rho / (D_US / 1e6)), unit=unit * 1.0001)
    assert p.end_to_end.p99_us < alone.p99_us + second.p99_us - 5 * D_US


def test_tandem_sustainable_rate_is_erlangs_md1_rate_at_the_budget_less_the_second_step():
    steps = [PipelineStep("a", ONE, ServiceModel(D_US, 0.0)), PipelineStep("b", ONE, ServiceModel(D_US, 0.0))]
    truth = sustainable_rate_rps("M/D/1", D_US / 1e3, 100.0)  # budget 110 ms less the 10 ms of step b
    got = pipeline_rate(steps, 110_000.0, requests=50_000, seed=2)
    assert got.rate_rps == pytest.approx(truth, rel=0.05)
    assert got.latency_us <= 110_000.0 and got.prediction is not None


def test_parallel_branches_join_at_the_slower_branch():
    # a -> (b, c) -> d: d reads both branches, the request is answered once both are done.
    steps = [
        PipelineStep("a", ONE, ServiceModel(1_000.0, 0.0), after=()),
        PipelineStep("b", ONE, ServiceModel(5_000.0, 0.0), after=(0,)),
        PipelineStep("c", ONE, ServiceModel(2_000.0, 0.0), after=(0,)),
        PipelineStep("d", ONE, ServiceModel(500.0, 0.0), after=(1, 2)),
    ]
    p = simulate_pipeline(steps, 10.0, arrival="constant", overhead_us=100.0)  # 100 ms apart: nothing queues
    assert p.end_to_end.p50_us == pytest.approx(1_000 + 5_000 + 500 + 100)
    assert p.end_to_end.p99_us == pytest.approx(p.end_to_end.p50_us)
    with pytest.raises(UsageError, match="each must come before it"):
        simulate_pipeline([PipelineStep("x", ONE, ServiceModel(1.0, 0.0), after=(1,))], 10.0)


def test_stages_fixture_batching_both_hungry_steps_is_what_pays():
    def steps(decode: BatcherConfig, infer: BatcherConfig) -> list[PipelineStep]:
        lock = Contention(1.0)  # one emulated device per step
        return [PipelineStep("stage_decode", decode, DECODE, lock), PipelineStep("stage_infer", infer, INFER, lock),
                PipelineStep("stage_post", ONE, POST, lock)]  # fmt: skip

    budget = 100_000.0
    neither = pipeline_rate(steps(ONE, ONE), budget)
    one_only = pipeline_rate(steps(BATCHED, ONE), budget)
    both = pipeline_rate(steps(BATCHED, BATCHED), budget)
    # Unbatched, each hungry step holds at most 1 / 6.2 ms = 161 req/s.
    assert 0.7 * 161 <= neither.rate_rps <= 1.02 * 161
    assert one_only.rate_rps <= 1.1 * neither.rate_rps and one_only.bottleneck == "stage_infer"
    assert both.rate_rps >= 3 * neither.rate_rps
    assert both.prediction is not None and both.prediction.bottleneck().name in ("stage_decode", "stage_infer")
    ranked = score_pipelines([steps(ONE, ONE), steps(BATCHED, ONE), steps(BATCHED, BATCHED)], budget, keep=1)
    assert ranked[0].configs == (BATCHED, BATCHED, ONE) and ranked[0].rate_rps == pytest.approx(both.rate_rps)
    assert sum(1 for r in ranked if r.bounded) >= 1  # the unbatched pair's bound is below the best found

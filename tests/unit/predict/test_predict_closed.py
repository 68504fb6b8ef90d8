"""The closed-loop figure (perfkit.predict._closed) against closed forms: N clients, each sending
when its last answer returns, without batching (saturating the instances) and with a batcher
whose clients travel as one batch. No server."""

from __future__ import annotations

import math

import pytest

from perfkit.errors import UsageError
from perfkit.predict import BatcherConfig, Contention, ServiceModel, score_space_closed, sustainable_concurrency

D_US = 10_000.0  # the queue fixture's service time (fixtures/models/queue: service_ms 10)
OVERHEAD_US = 1_000.0


@pytest.mark.parametrize(("budget_ms", "want"), [(55.0, 10), (45.0, 8), (31.0, 6)])
def test_instances_saturate_and_the_figure_is_the_highest_concurrency_within_the_budget(budget_ms: float, want: int):
    # No batching, two instances, D = 10 ms, 1 ms outside the instance. Past N = 2 (D + g) / D
    # clients the instances are busy all the time: 2 / D = 200 req/s (mean latency N / 200 s by
    # Little's law), each instance serving its clients in turn: the slowest request waits for
    # ceil(N / 2) executions, its p99. The highest N within budget B is 2 floor(B / D); its
    # throughput, 200 req/s.
    r = sustainable_concurrency(BatcherConfig(instances=2), ServiceModel(D_US, 0.0, OVERHEAD_US), budget_ms * 1e3,
                                max_concurrency=64, requests=4_000)  # fmt: skip
    assert r.concurrency == want
    assert r.rate_rps == pytest.approx(200.0, rel=1e-3)
    assert r.latency_us == pytest.approx(math.ceil(want / 2) * D_US, rel=1e-6)


def test_below_saturation_the_throughput_is_clients_over_their_cycle():
    # Eight instances, at most four clients: none waits, each request takes D + g and its client
    # sends the next at once: N / (D + g) req/s, at the largest N allowed (--max-concurrency 4).
    r = sustainable_concurrency(BatcherConfig(instances=8), ServiceModel(D_US, 0.0, OVERHEAD_US), 100e3,
                                max_concurrency=4, requests=2_000)  # fmt: skip
    assert r.concurrency == 4 and r.latency_us == pytest.approx(D_US + OVERHEAD_US)
    assert r.rate_rps == pytest.approx(4 / ((D_US + OVERHEAD_US) / 1e6), rel=1e-3)


def test_a_batcher_whose_clients_travel_as_one_batch_holds_at_its_full_batch():
    # max_batch_size 8 behind a 5 ms queue delay, 30 ms + 0.3 ms per item, 0.5 ms overhead: N < 8
    # clients wait out the delay each time (5 + 30 + 0.3 N + 0.5 ms, 35.8-37.6 ms), 8 go at once
    # (32.9 ms, 8 / 32.9 ms = 243 req/s); past 8 a request waits behind a full batch (over 60 ms).
    # Within 45 ms: 8 clients, 243 req/s.
    svc = ServiceModel(30_000, 300, overhead_us=500)
    r = sustainable_concurrency(BatcherConfig(8, True, (), 5_000), svc, 45e3, max_concurrency=16, requests=2_000)
    assert r.concurrency == 8 and r.mean_batch == pytest.approx(8.0)
    assert r.latency_us == pytest.approx(32_900, rel=1e-6)
    assert r.rate_rps == pytest.approx(8 / 32.9e-3, rel=1e-3)
    # The same within 34 ms: one client already waits 35.8 ms, so (as the measured closed-loop
    # search, which stops at its first level over the budget) nothing holds.
    none = sustainable_concurrency(BatcherConfig(8, True, (), 5_000), svc, 34e3, max_concurrency=16, requests=2_000)
    assert none.rate_rps == 0.0 and none.concurrency == 0


def test_a_space_is_ranked_by_the_closed_loop_figure_and_shared_devices_count():
    svc = ServiceModel(D_US, 0.0, OVERHEAD_US)
    cfgs = [BatcherConfig(instances=c) for c in (1, 2, 4)]
    # Instances on one device half shared: at most 1/f = 2 instances' worth, so 4 is no better than 2.
    out = score_space_closed(cfgs, svc, 55e3, max_concurrency=64, contention=Contention(0.5), requests=4_000)
    by = {r.config.instances: r for r in out}
    assert by[1].rate_rps == pytest.approx(100.0, rel=1e-3) and by[1].concurrency == 5
    assert by[2].rate_rps == pytest.approx(200.0, rel=1e-2) and by[4].rate_rps == pytest.approx(200.0, rel=1e-2)
    assert out[-1].config.instances == 1
    # keep=1: a config whose ceiling cannot reach the best figure found is bounded, not simulated.
    kept = score_space_closed(cfgs, svc, 55e3, max_concurrency=64, requests=4_000, keep=1)
    assert kept[0].config.instances == 4 and kept[0].rate_rps == pytest.approx(400.0, rel=1e-3)
    assert [r.bounded for r in kept] == [False, True, True]


def test_bad_inputs_are_one_line_usage_errors():
    with pytest.raises(UsageError, match="max_concurrency=0"):
        sustainable_concurrency(BatcherConfig(), ServiceModel(D_US, 0.0), 50e3, max_concurrency=0)
    with pytest.raises(UsageError, match="latency budget"):
        sustainable_concurrency(BatcherConfig(), ServiceModel(D_US, 0.0), 0.0, max_concurrency=4)

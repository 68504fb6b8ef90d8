"""What the predicted search predicts under the trial's load (tuner/_search/_predict_load.py): the
figure a measured trial reads, open loop (the sustainable rate) or closed loop (the throughput at
the highest concurrency within the budget), on a stand-in runner. No server."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from perfkit import predict
from perfkit.errors import UsageError
from perfkit.records import Budget, Calibration, CalibrationPoint, LoadLevel
from perfkit.tuner._search._predict import Predictor
from perfkit.tuner._search._predict_load import check_model_load, latency_at_figure, score_config, score_configs
from perfkit.tuner._trial_state import TrialState

SERVICE_US = 10_000.0
OVERHEAD_US = 1_000.0
CAL = Calibration("queue", (CalibrationPoint(1, 100, SERVICE_US),), SERVICE_US, 0.0, 0.0, 0.0, overhead_us=OVERHEAD_US)
SVC = predict.service_model(CAL)


def _runner(load_mode: str, *, budget_ms: float = 55.0, max_concurrency: int = 64, trace: str | None = None) -> Any:
    """A stand-in runner: the budget, and the trials' load (TrialLoadSettings' fields read)."""
    open_loop = load_mode in ("rate", "trace")
    return SimpleNamespace(
        s=SimpleNamespace(budget=Budget(budget_ms, 99.0, "latency")),
        trial_load=SimpleNamespace(
            open_loop=open_loop,
            load_mode=load_mode,
            distribution="constant",
            max_concurrency=max_concurrency,
            trace=trace,
        ),  # fmt: skip
        space=SimpleNamespace(original_params={"max_batch_size": 0, "instance_count": 1}, dimensions=[]),
        original_fixed_params=lambda: {"instance_count": 1},
        emit=lambda ev: None,
    )


def test_a_closed_loop_ranks_configs_by_the_throughput_at_their_highest_concurrency_within_budget():
    # One or two instances of 10 ms, 1 ms outside: N clients saturate them at 100 and 200 req/s,
    # the slowest request waiting ceil(N / c) executions; within 55 ms, N = 5 and 10.
    t = _runner("concurrency")
    cfgs = [predict.BatcherConfig(instances=c) for c in (1, 2)]
    out = score_configs(t, cfgs, SVC, predict.Contention(), requests=4_000, keep=None)
    assert [(r.config.instances, r.concurrency) for r in out] == [(2, 10), (1, 5)]
    assert [r.rate_rps for r in out] == pytest.approx([200.0, 100.0], rel=1e-3)
    # --max-concurrency bounds the clients, as it bounds the measured trial's levels
    capped = score_config(_runner("concurrency", max_concurrency=4), cfgs[1], SVC, predict.Contention(), requests=4_000)
    assert capped.concurrency == 4 and capped.rate_rps == pytest.approx(200.0, rel=1e-3)


def test_an_open_loop_ranks_configs_by_their_sustainable_rate():
    t = _runner("rate")
    cfgs = [predict.BatcherConfig(instances=c) for c in (1, 2)]
    out = score_configs(t, cfgs, SVC, predict.Contention(), requests=4_000, keep=None)
    want = predict.sustainable_rate(cfgs[1], SVC, 55e3, arrival="constant", requests=4_000)
    assert out[0].config.instances == 2 and out[0].concurrency is None
    assert out[0].rate_rps == pytest.approx(want.rate_rps)


def test_a_closed_loop_trial_is_checked_by_its_throughput_alone():
    # No open-loop rate to simulate the latency at: a closed loop's clients set its load.
    t = _runner("concurrency")
    assert latency_at_figure(t, CAL, predict.BatcherConfig(), 100.0, requests=2_000) is None
    ps = Predictor(t, calibration=CAL)
    st = TrialState(params={}, feasible=True, load=LoadLevel("concurrency", 5.0), throughput_infer_per_s=70.0,
                    latency_us=50_000.0)  # fmt: skip
    off = ps.check(2, st, predicted_rps=100.0)
    assert not off.held and off.latency_us is None  # 30% off, no latency to hold it
    near = ps.check(3, TrialState(params={}, feasible=True, load=LoadLevel("concurrency", 5.0),
                                  throughput_infer_per_s=90.0, latency_us=50_000.0), predicted_rps=100.0)  # fmt: skip
    assert near.held
    check_model_load(t.trial_load)  # a closed loop is predicted: no error


def test_a_trace_is_predicted_from_its_own_arrival_times(tmp_path: Path):
    # Bursts of 4 requests at once every 100 ms (perfkit profile --trace's JSONL), one instance of 10
    # ms: a burst's last request waits 40 ms at any speed where the bursts do not overlap, so within
    # 45 ms it holds up to the instance's 100 req/s, and within 35 ms at no speed; two instances
    # halve the wait (20 ms) and hold up to 200 req/s.
    path = tmp_path / "trace.jsonl"
    path.write_text(
        "".join(json.dumps({"timestamp": 100.0 * i, "inputs": {}}) + "\n" for i in range(300) for _ in range(4))
    )
    t = _runner("trace", budget_ms=45.0, trace=str(path))
    svc = predict.ServiceModel(SERVICE_US, 0.0)
    cfgs = [predict.BatcherConfig(instances=c) for c in (1, 2)]
    out = score_configs(t, cfgs, svc, predict.Contention(), requests=6_000, keep=None)
    by = {r.config.instances: r for r in out}
    assert by[1].rate_rps == pytest.approx(100.0, rel=0.03) and by[2].rate_rps == pytest.approx(200.0, rel=0.03)
    tight = score_config(_runner("trace", budget_ms=35.0, trace=str(path)), predict.BatcherConfig(), svc,
                         predict.Contention(), requests=6_000)  # fmt: skip
    assert tight.rate_rps < 0.1
    # the latency check of a trace trial replays the trace at the mean rate measured
    cal = Calibration("m", (CalibrationPoint(1, 100, SERVICE_US),), SERVICE_US, 0.0, 0.0, 0.0)
    assert latency_at_figure(t, cal, predict.BatcherConfig(), 50.0, requests=6_000) == pytest.approx(40e3, rel=1e-6)
    with pytest.raises(UsageError, match="--load trace without --trace"):
        check_model_load(_runner("trace").trial_load)

"""A decoupled model's stream model from one level of one stream at a time (tuner/_search/_stream_calibrate.py):
from the server's response statistics where it keeps them (index 0: the first response's time,
the later ones the interval), else from the stream measured (TTFT less the wait and the overhead,
the ITL); and an execution that ends long before its stream (execute returned, the responses sent
from threads) is not the stream model. No server."""

from __future__ import annotations

import dataclasses

import pytest

from perfkit.errors import MeasurementError
from perfkit.records import LatencySummary, LevelResult, LoadLevel, Precision, ServerStats, StreamingSummary
from perfkit.tuner._search._stream_calibrate import StreamNotHeld, response_times_us, stream_model


def _lat(mean_ms: float, p99_ms: float | None = None) -> LatencySummary:
    us, top = mean_ms * 1e3, (p99_ms or mean_ms) * 1e3
    return LatencySummary("service", 100, us, top, us, 0, us, us, us, top, top, "")  # type: ignore[arg-type]  # test data


def _level(*, e2e_ms: float, ttft_ms: float, itl_ms: float, infer_ms: float, queue_ms: float = 0.2) -> LevelResult:
    st = StreamingSummary(
        ttft=_lat(ttft_ms), itl=_lat(itl_ms, 2 * itl_ms), second_token=_lat(itl_ms), output_len_mean=4,
        output_len_p50=4, output_len_p99=4, output_len_max=4, responses_per_s=180, output_tokens_per_s=180,
        request_count=45,
    )  # fmt: skip
    server = ServerStats("m", 45, 45, 45, queue_ms * 1e3, 40.0, infer_ms * 1e3, 10.0, 0.0)
    return LevelResult(
        LoadLevel("concurrency", 1), 1, True, Precision(None, None), 1, 45, 45, 45, 45, 45, 0, {},
        0, 0, None, _lat(e2e_ms), None, (), server=server, streaming=st,
    )  # fmt: skip


def _stats(responses: dict[str, tuple[int, int]]) -> dict:
    rs = {
        k: {"success": {"count": n, "ns": ns}, "compute_infer": {"count": n, "ns": ns}}
        for k, (n, ns) in responses.items()
    }
    return {"model_stats": [{"name": "m", "version": "1", "response_stats": rs}]}


def test_response_statistics_are_read_per_index_between_two_answers():
    before = _stats({"0": (10, 80_000_000), "1": (10, 40_000_000)})
    after = _stats({"0": (30, 240_000_000), "1": (30, 130_000_000), "2": (20, 80_000_000), "final": (5, 1)})
    assert response_times_us(before, after, "m") == {0: (20, 8_000.0), 1: (20, 4_500.0), 2: (20, 4_000.0)}
    # the bundled 2.51's python backend keeps none: {} (then the stream measured tells)
    assert response_times_us(_stats({}), _stats({}), "m") == {}
    assert response_times_us(before, after, "other") == {}


def test_the_servers_response_times_make_the_stream_where_it_keeps_them():
    level = _level(e2e_ms=21.0, ttft_ms=9.0, itl_ms=4.1, infer_ms=20.3)
    model, overhead_us, source = stream_model(level, {0: (45, 8_000.0), 1: (45, 4_000.0), 2: (45, 4_200.0)})
    assert source == "the server's response statistics"
    assert model.first_us == 8_000.0 and model.interval_us == pytest.approx(4_100.0)
    # TTFT 9 ms = wait 0.2 + first 8 + 0.8 outside the instance
    assert model.first_overhead_us == pytest.approx(800.0)
    assert overhead_us == pytest.approx(21_000 - 200 - (40 + 20_300 + 10))
    assert model.responses == 4 and model.itl_us(99.0) == pytest.approx(8_200.0)


def test_without_response_statistics_the_measured_stream_makes_it():
    level = _level(e2e_ms=21.5, ttft_ms=9.5, itl_ms=4.0, infer_ms=20.5)
    model, overhead_us, source = stream_model(level, {})
    assert source == "the measured stream"
    assert overhead_us == pytest.approx(21_500 - 200 - 20_550)
    # the first response's way out taken to cost what the request's overhead does
    assert model.first_overhead_us == pytest.approx(overhead_us)
    assert model.first_us + model.first_overhead_us == pytest.approx(9_500 - 200)
    assert model.interval_us == 4_000.0


def test_an_execution_that_ends_before_its_stream_is_not_the_stream_model():
    # execute returned at once (0.1 ms) while the stream went on for 100 ms from a thread of the model's
    with pytest.raises(StreamNotHeld, match="end before its streams"):
        stream_model(_level(e2e_ms=100.0, ttft_ms=20.0, itl_ms=5.0, infer_ms=0.1), {})
    with pytest.raises(MeasurementError, match="streamed nothing"):
        level = _level(e2e_ms=21.0, ttft_ms=9.0, itl_ms=4.0, infer_ms=20.0)
        stream_model(dataclasses.replace(level, streaming=None), {})


def _predictor(metric: str, budget_ms: float):
    """A stream predictor over a stand-in runner (its budget, arrival process and original config), with
    the calibration a held 20 ms stream gives (first response 8 ms + 0.3 ms outside, 3 x 4 ms after)."""
    from types import SimpleNamespace

    from perfkit import predict
    from perfkit.records import Budget, Calibration, CalibrationPoint
    from perfkit.tuner._search._predict_stream import StreamPredictor

    space = SimpleNamespace(original_params={"instance_count": 1}, dimensions=[])
    t = SimpleNamespace(s=SimpleNamespace(budget=Budget(budget_ms, 99.0, metric=metric)), space=space,
                        trial_load=SimpleNamespace(distribution="poisson"), original_fixed_params=dict)  # fmt: skip
    p = StreamPredictor(t)  # type: ignore[arg-type]  # a stand-in runner: what the predictor reads of it
    p.calibration = Calibration("m", (CalibrationPoint(1, 45, 20_000.0),), 20_000.0, 0.0, 0.0, 0.0, overhead_us=500.0)
    p.stream = predict.StreamModel(8_000.0, 4_000.0, 4, first_overhead_us=300.0, itl_p_us=((99.0, 4_300.0),))
    return p


def test_the_stream_predictor_holds_the_simulator_to_the_budgets_own_statistic():
    from perfkit import predict

    ttft = _predictor("ttft", 50.0)
    # TTFT 50 ms stands for an end-to-end 50 + (20 + 0.5) - (8 + 0.3) ms: the rest of each stream
    assert ttft.simulated_budget_us() == pytest.approx(50_000 + 20_500 - 8_300)
    assert _predictor("latency", 70.0).simulated_budget_us() == 70_000.0
    assert _predictor("itl", 4.0).simulated_budget_us() == 0.0  # ITL p99 4.3 ms: past it at any rate
    # a trial's check: the simulated TTFT p99 of its config at the rate it held, two instances' less than one's
    one, two = ttft.latency_at_measured({}, 35.0), ttft.latency_at_measured({"instance_count": 2}, 35.0)
    assert one is not None and two is not None and 8_300 <= two < one
    service = predict.ServiceModel(20_000.0, 0.0, overhead_us=500.0)
    want = predict.simulate_stream(predict.BatcherConfig(), ttft.stream, service, predict.Load("poisson", 35.0),
                                   requests=6_000).percentile_us("ttft", 99.0)  # fmt: skip
    assert one == pytest.approx(want)

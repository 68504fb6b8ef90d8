"""A BLS model's calls read from the server's statistics deltas over the calibration's levels
(tuner/_search/_bls_calls.py): the fan-out is each called model's request count against the BLS
model's where that is the same whole number at every level; the BLS model's own time its compute
time less its calls' queue and compute time; a fan-out that moves with the level (data-dependent)
or calls that overlap are said, and the search measures. No server."""

from __future__ import annotations

import pytest

from perfkit.records import ServerStats
from perfkit.tuner._search._bls_calls import BlsLevel, read_calls


def _stats(model: str, requests: int, *, queue_us: float = 0.0, compute_us: float = 0.0, executions: int = 0):
    return ServerStats(
        model=model, request_count=requests, execution_count=executions or requests, inference_count=requests,
        queue_avg_us=queue_us, compute_input_avg_us=50.0, compute_infer_avg_us=compute_us - 100.0,
        compute_output_avg_us=50.0, request_avg_us=queue_us + compute_us,
    )  # fmt: skip


def _level(label: str, bls: int, decode: int, infer: int, *, bls_us: float, q_us: float = 0.0, executions: int = 0):
    """One level: the BLS model's `bls` requests taking bls_us each, decode's and infer's calls
    taking 6.2 ms (plus q_us queued) each."""
    return BlsLevel(label, {
        "bls": _stats("bls", bls, queue_us=300.0, compute_us=bls_us, executions=executions),
        "decode": _stats("decode", decode, queue_us=q_us, compute_us=6_200.0),
        "infer": _stats("infer", infer, queue_us=q_us, compute_us=6_200.0),
    })  # fmt: skip


def test_the_fan_out_is_each_called_models_requests_against_the_bls_models_at_every_level():
    levels = [
        _level("1 client", 400, 400, 800, bls_us=1_000.0 + 3 * 6_200.0),
        _level("2 clients", 610, 611, 1_219, bls_us=1_100.0 + 3 * 6_200.0),  # a call in flight at the edge
        _level("4 clients", 800, 800, 1_600, bls_us=1_200.0 + 3 * (6_200.0 + 500.0), q_us=500.0),
    ]
    calls = read_calls("bls", ["decode", "infer"], levels)
    assert calls.fanout == (1, 2) and calls.why_untold is None
    assert calls.ratios[1] == pytest.approx((611 / 610, 1_219 / 610))
    # own time at the first level: its compute less one decode call and two infer calls (queue + compute)
    assert calls.own_us == pytest.approx(1_000.0) and calls.calls_us == pytest.approx(3 * 6_200.0)
    assert "decode x1, infer x2" in calls.line() and "1.00 ms" in calls.line()


def test_a_batch_of_bls_requests_run_one_after_another_reports_the_whole_execution_for_each():
    # 200 executions of two requests: each request reports the execution's 2 x (own + calls)
    levels = [
        _level("1 client", 400, 400, 400, bls_us=2 * (800.0 + 2 * 6_200.0), executions=200),
        _level("2 clients", 400, 400, 400, bls_us=2 * (800.0 + 2 * 6_200.0), executions=200),
    ]
    calls = read_calls("bls", ["decode", "infer"], levels)
    assert calls.fanout == (1, 1) and calls.own_us == pytest.approx(800.0)


def test_a_fan_out_that_depends_on_the_data_is_said_and_not_simulated():
    # infer called twice for some requests: 1.33, 1.41, 1.38 calls a request
    levels = [
        _level("1 client", 300, 300, 400, bls_us=10_000.0),
        _level("2 clients", 500, 500, 705, bls_us=10_000.0),
        _level("4 clients", 800, 800, 1_104, bls_us=10_000.0),
    ]
    calls = read_calls("bls", ["decode", "infer"], levels)
    assert calls.fanout is None and calls.why_untold is not None
    assert "'bls' calls infer 1.33 at 1 client, 1.41 at 2 clients, 1.38 at 4 clients" in calls.why_untold
    assert "depend on the data" in calls.why_untold and calls.line() == calls.why_untold
    # the same whole number at one level only is not enough either: a call skipped at one level
    skipped = [_level("1 client", 300, 300, 300, bls_us=14_000.0), _level("2 clients", 300, 300, 270, bls_us=14_000.0)]
    assert read_calls("bls", ["decode", "infer"], skipped).fanout is None


def test_calls_that_overlap_are_said_and_not_simulated():
    # two calls of 6.2 ms each, the BLS model's execution 7 ms a request: they ran at the same time
    levels = [_level("1 client", 300, 300, 300, bls_us=7_000.0), _level("2 clients", 500, 500, 500, bls_us=7_100.0)]
    calls = read_calls("bls", ["decode", "infer"], levels)
    assert calls.fanout is None and "overlap" in (calls.why_untold or "")
    assert "7.00 ms a request at 1 client" in (calls.why_untold or "")


def test_fewer_than_two_levels_answered_tell_nothing():
    levels = [_level("1 client", 300, 300, 300, bls_us=14_000.0), _level("2 clients", 0, 0, 0, bls_us=0.0)]
    calls = read_calls("bls", ["decode", "infer"], levels)
    assert calls.fanout is None and "1 calibration level" in (calls.why_untold or "")

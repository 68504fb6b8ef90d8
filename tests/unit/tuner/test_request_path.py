"""Which configs the predicted search measures where the request path bounds the best predicted
alike (tuner/_search/_request_path.py measured_first), with a calibration shaped as onnx_mlp's on one
server CPU: executions of 166 us + 67 us an item, two instances no faster than one (shared
fraction 1.00), the path holding 9,027 req/s."""

from __future__ import annotations

import dataclasses
from typing import Any

from perfkit import predict
from perfkit.records import Calibration, CalibrationPoint
from perfkit.tuner._search._request_path import (
    AT_CEILING_MEASURED,
    TOP_MEASURED,
    headroom_first,
    measured_first,
    path_ceiling_rps,
)

ONNX = Calibration("onnx_mlp", (CalibrationPoint(1, 1000, 233.0), CalibrationPoint(128, 100, 8_740.0)), 166.0, 67.0,
                   0.1, 0.6, overhead_us=174.0, instance_counts=(1, 2), saturated_rps=(4_665.0, 3_877.0),
                   shared_fraction=1.0, host_us=1e6 / 9_027.0)  # fmt: skip
SIZES = (8, 32, 128)


def _space(cal: Calibration) -> tuple[list[dict[str, Any]], dict[tuple[int, int], predict.RateResult]]:
    """Every (max batch size, instances) of the space, batching on, predicted where the path puts
    them (its capacity, a little under as the simulator's lattice puts it), no batching too, ranked
    as the predicted search ranks them (headroom_first)."""
    capacity = path_ceiling_rps(cal) or 20_000.0
    results: dict[tuple[int, int], predict.RateResult] = {}
    for mbs in (0, *SIZES):
        for n in (1, 2):
            cfg = predict.BatcherConfig(max_batch_size=mbs, dynamic_batching=mbs > 0, max_queue_delay_us=1000.0 if mbs
                                        else 0.0, instances=n)  # fmt: skip
            rate = 0.985 * capacity if mbs else 4_200.0
            results[(mbs, n)] = predict.RateResult(cfg, rate, 5_000.0, 8.0)
    points = [{"max_batch_size": mbs, "instance_count": n} for mbs, n in results]

    def result(p: dict[str, Any]) -> predict.RateResult:
        return results[(p["max_batch_size"], p["instance_count"])]

    ranked = sorted(points, key=lambda p: headroom_first(cal, result(p).config, result(p).rate_rps))
    return ranked, results


def _chosen(cal: Calibration) -> list[tuple[int, int]]:
    ranked, results = _space(cal)
    out = measured_first(cal, ranked, lambda p: results[(p["max_batch_size"], p["instance_count"])])
    return [(p["max_batch_size"], p["instance_count"]) for p in out]


def test_configs_the_path_bounds_alike_are_measured_at_both_batch_sizes_with_the_most_room_on_each_instance_count():
    """The simulator sees only the path there: mbs 128 and 32 (the most room for their instances)
    are each measured on one and two instances. Before, three were: 32 on two instances, the best
    by perf_analyzer's grid on onnx_mlp, was never measured."""
    chosen = _chosen(ONNX)
    assert len(chosen) == AT_CEILING_MEASURED
    assert set(chosen) == {(128, 1), (128, 2), (32, 1), (32, 2)}
    assert chosen[0][0] == 128  # the most room first


def test_without_a_path_capacity_the_best_predicted_are_measured_as_before():
    """A calibration that found the instances, not the path, holding the model: the first
    TOP_MEASURED in rank order, the best predicted rate first."""
    held_by_instances = dataclasses.replace(ONNX, host_us=0.0, saturated_rps=(4_665.0, 9_000.0), shared_fraction=0.0)
    ranked, results = _space(held_by_instances)
    chosen = _chosen(held_by_instances)
    assert len(chosen) == TOP_MEASURED
    assert chosen == [(p["max_batch_size"], p["instance_count"]) for p in ranked[:TOP_MEASURED]]
    assert all(results[c].rate_rps == max(r.rate_rps for r in results.values()) for c in chosen)

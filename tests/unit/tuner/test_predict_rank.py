"""The predicted search's ranking by the objective (tuner/_search/_predict_rank.py): per instance
and per GPU the predicted figure over the units the point's config occupies, as the trial counts
them; Pareto the predicted front of throughput and latency; a resumed study what it has not
measured. On stand-in runners. No server."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import optuna
import pytest

from perfkit import predict
from perfkit.errors import ConfigError
from perfkit.tuner._search._predict_rank import (
    FRONT_MEASURED,
    front,
    measured_keys,
    prediction_bounds_original,
    queued_together,
    rank_key,
    ranked_to_measure,
    scoring_keep,
    units,
)
from perfkit.tuner._search._request_path import TOP_MEASURED


def _runner(objective: str = "throughput", *, resume: bool = False, kind: str = "KIND_CPU", gpus: int = 0) -> Any:
    """A stand-in runner: the objective, --resume, an open loop, and a subject whose candidate is
    a config with the point's instance count of `kind` (on `gpus` visible GPUs)."""

    def candidate(params: dict[str, Any], **_: Any) -> Any:
        group = f"count: {params['instance_count']} kind: {kind}"
        return SimpleNamespace(text=f'name: "m" instance_group [ {{ {group} }} ]')

    return SimpleNamespace(
        s=SimpleNamespace(objective=objective, resume=resume),
        trial_load=SimpleNamespace(open_loop=True),
        space=SimpleNamespace(gpus=gpus),
        subject=SimpleNamespace(candidate=candidate),
    )


def _scores(*rows: tuple[int, int, float, float]) -> tuple[list[dict[str, Any]], dict[Any, predict.RateResult]]:
    """Points (max_batch_size, instances) with their predicted rate and latency."""
    points, by = [], {}
    for mbs, count, rate, latency_us in rows:
        cfg = predict.BatcherConfig(mbs, mbs > 0, (), 0.0, count)
        points.append({"max_batch_size": mbs, "instance_count": count})
        by[(mbs, count)] = predict.RateResult(cfg, rate, latency_us, 1.0)
    return points, by


def _result(by: dict[Any, predict.RateResult]) -> Any:
    return lambda p: by[(p["max_batch_size"], p["instance_count"])]


def test_per_instance_ranks_the_predicted_figure_over_the_instances():
    # 100, 180 and 300 req/s at 1, 2 and 4 instances: 100, 90 and 75 per instance, one instance first
    t = _runner("per-instance")
    points, by = _scores((8, 1, 100.0, 50e3), (8, 2, 180.0, 50e3), (8, 4, 300.0, 50e3))
    result = _result(by)
    assert [units(t, p) for p in points] == [1.0, 2.0, 4.0]
    # a point whose config cannot be written (its trial would be rejected) ranks last
    refused = _runner("per-instance")
    refused.subject.candidate = lambda params, **_: (_ for _ in ()).throw(ConfigError("does not round-trip"))
    assert units(refused, points[0]) == math.inf
    ranked = sorted(points, key=lambda p: rank_key(t, p, (-result(p).rate_rps, 0.0), result(p).rate_rps))
    assert [p["instance_count"] for p in ranked] == [1, 2, 4]
    assert ranked_to_measure(t, None, ranked, points, result, done=set()) == ranked[:TOP_MEASURED]
    # ranked by throughput the other way round (the rate's key as given)
    thr = _runner()
    by_rate = sorted(points, key=lambda p: rank_key(thr, p, (-result(p).rate_rps, 0.0), result(p).rate_rps))
    assert [p["instance_count"] for p in by_rate] == [4, 2, 1]


def test_per_gpu_counts_the_gpus_the_instances_occupy():
    # Instances on GPU without a gpus list spread over every visible GPU (Triton's default): with two
    # GPUs visible, one or four instances occupy both, so per GPU the four instances rank first.
    t = _runner("per-gpu", kind="KIND_GPU", gpus=2)
    points, by = _scores((8, 1, 100.0, 50e3), (8, 4, 300.0, 50e3))
    result = _result(by)
    assert [units(t, p) for p in points] == [2.0, 2.0]
    ranked = sorted(points, key=lambda p: rank_key(t, p, (0.0, 0.0), result(p).rate_rps))
    assert [p["instance_count"] for p in ranked] == [4, 1]
    assert units(_runner("per-instance", kind="KIND_GPU", gpus=2), points[1]) == 8.0  # 4 on each of 2 GPUs


def test_pareto_measures_the_predicted_front_of_throughput_and_latency():
    # (300, 90 ms), (200, 50 ms), (150, 60 ms: beaten by the second on both), (100, 20 ms)
    t = _runner("pareto")
    points, by = _scores((16, 2, 300.0, 90e3), (8, 2, 200.0, 50e3), (8, 1, 150.0, 60e3), (4, 1, 100.0, 20e3))
    result = _result(by)
    on = front(points, result)
    assert [(p["max_batch_size"], p["instance_count"]) for p in on] == [(16, 2), (8, 2), (4, 1)]
    # the front is taken over every point, not the throughput's ranking (given here as the first only)
    assert ranked_to_measure(t, None, points[:1], points, result, done=set()) == on
    # a point scored to no rate (bounded, or nothing within the budget) is not on it
    by[(4, 1)] = predict.RateResult(by[(4, 1)].config, 0.0, 20e3, 1.0)
    assert (4, 1) not in [(p["max_batch_size"], p["instance_count"]) for p in front(points, result)]
    many, many_by = _scores(*((n, 1, 100.0 + n, 1e3 * n) for n in range(1, 12)))  # each faster and slower
    assert len(front(many, _result(many_by))) == 11
    assert len(ranked_to_measure(t, None, [], many, _result(many_by), done=set())) == FRONT_MEASURED


def test_a_resumed_study_queues_only_what_it_has_not_measured():
    points, by = _scores((16, 2, 300.0, 90e3), (8, 2, 200.0, 50e3), (8, 1, 150.0, 60e3), (4, 1, 100.0, 20e3))
    result = _result(by)
    study = optuna.create_study(directions=["maximize"])
    for params in points[:2]:  # the two best measured before the study was resumed
        trial = study.ask()
        trial.set_user_attr("params", params)
        study.tell(trial, 1.0)
    pending = study.ask()  # a trial never finished: not measured
    pending.set_user_attr("params", points[2])

    def key(params: dict[str, Any]) -> Any:
        return result(params).config

    done = measured_keys(study, key)
    assert done == {by[(16, 2)].config, by[(8, 2)].config}
    t = _runner(resume=True)
    chosen = ranked_to_measure(t, None, points, points, result, done=done)
    assert chosen == points[2:]  # the best of what is left first
    # a resumed Pareto tune: the front of what is left, (150, 60 ms) and (100, 20 ms)
    assert ranked_to_measure(_runner("pareto", resume=True), None, [], points, result, done=done) == points[2:]


@pytest.mark.parametrize(
    ("objective", "resume", "keep", "together", "bounds"),
    [
        ("throughput", False, 3, 1, True),
        ("throughput", True, None, 1, True),
        ("per-instance", False, None, 3, False),
        ("pareto", False, None, 3, False),
    ],
)
def test_what_each_objective_simulates_and_queues(objective: str, resume: bool, keep: Any, together: int, bounds: bool):
    # throughput: the best k kept exact, the best queued alone and each next while it could beat the best
    # measured, your config measured at its prediction only where it cannot compete; the others:
    # every config simulated, every chosen point queued together, your config searched in full
    t = _runner(objective, resume=resume)
    top = [({"instance_count": c}, 100.0) for c in (1, 2, 3)]
    assert scoring_keep(t, 3) == keep
    assert queued_together(t, top) == together
    assert prediction_bounds_original(t) is bounds

"""Admission control on the real server: the queue-policy knob written into a config, served as
written, and the measurement moves: under Poisson overload a bounded queue rejects (counted as
rejections, with Triton's own message), where the unbounded one rejects nothing and queues."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from perfkit import measure
from perfkit.cli._request_parameters import with_admission
from perfkit.records import LoadLevel, ProfileSpec, RunRecord
from perfkit.server import LocalLaunch, launch_local
from perfkit.server.modelconfig import format_config, parse_config
from perfkit.tuner import TuneSpace, apply_params, resolve
from tests.conftest import copy_models

# The queue fixture serves one request per execution for 10 ms (capacity 100 req/s on one
# instance): 200 req/s offered is twice what it can serve.
OVERLOAD = ProfileSpec(
    model="queue",
    levels=(LoadLevel("request_rate", 200.0, "poisson"),),
    measurement_interval_ms=500,
    min_windows=3,
    max_trials=4,
    warmup_s=0.3,
)
QUEUE_SIZE = 2


def _batched(text: str) -> str:
    # max_batch_size 1 with the dynamic batcher: the queue policy is the batcher's, and one
    # request per execution keeps the fixture's known service time.
    return text.replace("max_batch_size: 0", "max_batch_size: 1") + "dynamic_batching { }\n"


def _write_candidate(repo: Path, max_queue_size: int) -> None:
    path = repo / "queue" / "config.pbtxt"
    cfg = parse_config(_batched(path.read_text()))
    rs = resolve(TuneSpace(dynamic_batching=(True,)), cfg, path.parent, latency_budget_us=50_000, max_error_rate=0.05)
    assert rs.dimension("max_queue_size") is not None
    new = apply_params(cfg, {"dynamic_batching": True, "max_queue_size": max_queue_size}, rs)
    path.write_text(format_config(new))


def _overload(repo: Path) -> tuple[RunRecord, int]:
    with launch_local(LocalLaunch(repo, models=("queue",))) as server:
        served = server.model_config("queue")
        size = int(served.get("dynamic_batching", {}).get("default_queue_policy", {}).get("max_queue_size", 0))
        return measure.profile(server, OVERLOAD), size


@pytest.mark.usefixtures("tritonserver")
def test_a_bounded_queue_rejects_under_overload_and_the_rejections_are_counted(tmp_path: Path):
    bounded_repo = copy_models(tmp_path / "bounded", ["queue"])
    _write_candidate(bounded_repo, QUEUE_SIZE)
    bounded, served_size = _overload(bounded_repo)
    assert served_size == QUEUE_SIZE  # the server applied what the knob wrote

    lv = bounded.levels[0]
    # Every request is accounted for: the rejected ones are errors, named as the server's rejections.
    assert lv.rejected_count > 0 and lv.rejected_count == lv.error_count, lv.errors
    assert set(lv.errors) <= {"http_503"}
    assert lv.throughput_infer_per_s > 0
    # Triton's own reason (core src/scheduler_utils.cc PolicyQueue::Enqueue), kept in the level's note.
    assert "Exceeds maximum queue size" in lv.note, lv.note

    unbounded_repo = copy_models(tmp_path / "unbounded", ["queue"])
    _write_candidate(unbounded_repo, 0)
    unbounded, served_size = _overload(unbounded_repo)
    assert served_size == 0
    ulv = unbounded.levels[0]
    assert ulv.rejected_count == 0
    # The unbounded queue holds what the bounded one refused: its admitted requests wait longer.
    assert ulv.latency().p99_us > lv.latency().p99_us


@pytest.mark.usefixtures("tritonserver")
def test_a_request_timeout_reaches_the_queue_and_its_expiry_is_a_counted_rejection(tmp_path: Path):
    repo = copy_models(tmp_path, ["queue"])
    path = repo / "queue" / "config.pbtxt"
    # A long default timeout the request's own may shorten (allow_timeout_override), expired ones rejected.
    path.write_text(
        _batched(path.read_text()).replace(
            "dynamic_batching { }",
            "dynamic_batching { default_queue_policy { timeout_action: REJECT"
            " default_timeout_microseconds: 10000000 allow_timeout_override: true } }",
        )
    )
    # Eight requests in flight on a 10 ms server: each waits ~70 ms in the queue, past a 15 ms timeout.
    spec = dataclasses.replace(OVERLOAD, levels=(LoadLevel("concurrency", 8),))
    with launch_local(LocalLaunch(repo, models=("queue",))) as server:
        plain = measure.profile(server, spec).levels[0]
        timed = measure.profile(
            server, dataclasses.replace(spec, request_parameters=with_admission((), None, 15_000))
        ).levels[0]
    assert plain.error_count == 0  # the default timeout (10 s) expires none
    assert timed.rejected_count > 0 and timed.rejected_count == timed.error_count, timed.errors
    assert "Request timeout expired" in timed.note, timed.note

"""Admission control without a server: the queue-policy knobs (where they are searched, their values,
applied to a config and read back) and the error budget (a level's rejections within it or not)."""

from __future__ import annotations

from dataclasses import replace as dataclasses_replace
from pathlib import Path

import pytest

from perfkit.errors import UsageError
from perfkit.records import LatencySummary, LevelResult, LoadLevel, Precision, RunRecord
from perfkit.server.modelconfig import format_config, parse_config, read_config
from perfkit.tuner import Budget, TuneSettings, TuneSpace, apply_params, judge_trial, resolve
from perfkit.tuner._space import extract_params

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "fixtures" / "models"
BUDGET_US = 20_000


def _resolve(name: str, *, max_error_rate: float, text: str | None = None):
    cfg = parse_config(text) if text is not None else read_config(FIXTURES / name / "config.pbtxt")
    space = TuneSpace(dynamic_batching=(True,), instance_counts=(1, 2))
    rs = resolve(space, cfg, FIXTURES / name, latency_budget_us=BUDGET_US, max_error_rate=max_error_rate)
    return cfg, rs


def test_queue_policy_is_searched_only_with_an_error_budget():
    _, none = _resolve("batcher", max_error_rate=0.0)
    assert none.dimension("max_queue_size") is None and none.dimension("queue_timeout") is None
    assert "no error budget" in none.reasons["max_queue_size"]

    _, rs = _resolve("batcher", max_error_rate=0.05)
    size = rs.dimension("max_queue_size")
    # Depths 1, 2, 4, 8 of the original's batch (max_batch_size 8 on its 1 instance), and unbounded.
    assert size is not None and size.choices == (0, 8, 16, 32, 64)
    assert size.when_dynamic_batching
    timeout = rs.dimension("queue_timeout")
    # REJECT at a quarter and a half of the 20 ms budget, DELAY at half, or no timeout.
    assert timeout is not None and timeout.choices == ("none", "reject:5000", "reject:10000", "delay:10000")
    # The original has no dynamic batcher, so no policy of its own: only candidates with one get these.
    assert "max_queue_size" not in rs.original_params


def test_queue_policy_is_not_searched_without_dynamic_batching_or_on_a_sequence_model():
    _, seq = _resolve("accumulator", max_error_rate=0.05)
    assert seq.dimension("max_queue_size") is None
    assert "sequence batcher" in seq.reasons["max_queue_size"]
    cfg = read_config(FIXTURES / "batcher" / "config.pbtxt")
    off = resolve(
        TuneSpace(dynamic_batching=(False,)),
        cfg,
        FIXTURES / "batcher",
        latency_budget_us=BUDGET_US,
        max_error_rate=0.05,
    )
    assert off.dimension("max_queue_size") is None and "no dynamic batching" in off.reasons["max_queue_size"]


def test_applied_policy_reads_back_and_the_neutral_point_leaves_no_field():
    cfg, rs = _resolve("batcher", max_error_rate=0.05)
    params = {"dynamic_batching": True, "max_queue_size": 16, "queue_timeout": "delay:10000"}
    new = apply_params(cfg, params, rs)
    policy = new.dynamic_batching.default_queue_policy
    assert policy.max_queue_size == 16
    assert policy.default_timeout_microseconds == 10_000
    assert policy.timeout_action == type(policy).DELAY
    back = extract_params(parse_config(format_config(new)), backend="python")
    assert back["max_queue_size"] == 16 and back["queue_timeout"] == "delay:10000"

    rejecting = apply_params(cfg, {**params, "queue_timeout": "reject:5000"}, rs)
    assert rejecting.dynamic_batching.default_queue_policy.timeout_action == type(policy).REJECT

    neutral = apply_params(new, {"dynamic_batching": True, "max_queue_size": 0, "queue_timeout": "none"}, rs)
    assert neutral.HasField("dynamic_batching")
    assert not neutral.dynamic_batching.HasField("default_queue_policy")


def test_a_models_own_policy_is_kept_as_trial_zero():
    text = (FIXTURES / "batcher" / "config.pbtxt").read_text() + (
        "dynamic_batching { default_queue_policy { max_queue_size: 5 timeout_action: DELAY"
        " default_timeout_microseconds: 7000 } }\n"
    )
    _, rs = _resolve("batcher", max_error_rate=0.05, text=text)
    assert rs.original_params["max_queue_size"] == 5 and rs.original_params["queue_timeout"] == "delay:7000"
    assert 5 in rs.dimension("max_queue_size").choices
    assert "delay:7000" in rs.dimension("queue_timeout").choices


def test_unknown_timeout_label_is_a_usage_error():
    cfg, rs = _resolve("batcher", max_error_rate=0.05)
    with pytest.raises(UsageError, match="queue_timeout 'later:5'"):
        apply_params(cfg, {"dynamic_batching": True, "queue_timeout": "later:5"}, rs)


# -- the error budget ---------------------------------------------------------------------------
def _level(rate: float, tput: float, p99_ms: float, errors: dict[str, int]) -> LevelResult:
    lat = LatencySummary("service", 1000, 1, p99_ms * 1e3, 1, 0, 1, 1, 1, p99_ms * 1e3, p99_ms * 1e3, "")
    n = 1000
    return LevelResult(
        LoadLevel("concurrency", rate), 1, True, Precision(None, None), 1.0, n, n, tput, n, n,
        sum(errors.values()), errors, 0, 0, None, lat, None, (),
    )  # fmt: skip


def _run(*levels: LevelResult) -> RunRecord:
    return RunRecord("0", "now", (), {}, {}, {}, {}, tuple(levels))


def test_rejections_count_against_the_error_budget_and_other_errors_always_fail():
    strict = Budget(20)
    budget = Budget(20, max_error_rate=0.05)
    rejecting = _level(8, 900, 15, {"http_503": 40})  # 4% rejected
    assert rejecting.rejected_count == 40 and rejecting.rejection_rate == pytest.approx(0.04)
    assert not strict.within(rejecting) and budget.within(rejecting)
    assert not budget.within(_level(8, 900, 15, {"grpc_14": 60}))  # 6% > 5%
    assert not budget.within(_level(8, 900, 15, {"http_503": 10, "http_500": 1}))  # a failure, not a rejection


def test_verdict_takes_the_level_within_the_error_budget_and_says_what_it_gave_up():
    run = _run(_level(4, 500, 8, {}), _level(8, 900, 15, {"http_503": 40}), _level(16, 950, 14, {"http_503": 200}))
    strict = judge_trial(run, Budget(20))
    assert strict.throughput_infer_per_s == 500 and "rejection_rate" not in strict.metrics
    v = judge_trial(run, Budget(20, max_error_rate=0.05))
    assert v.throughput_infer_per_s == 900  # successes only; the 20%-rejecting level is out
    assert v.metrics["rejection_rate"] == pytest.approx(0.04)


def test_max_error_rate_setting_parses_shares_and_percentages_and_refuses_a_whole():
    s = TuneSettings.from_mapping("m", {"latency_budget": "20ms", "trials": 2}, flags={"max_error_rate": "5%"})
    assert s.budget.max_error_rate == pytest.approx(0.05)
    assert TuneSettings.from_mapping("m", {"latency_budget": "20ms", "trials": 2}).budget.max_error_rate == 0.0
    with pytest.raises(UsageError, match="--max-error-rate"):
        TuneSettings.from_mapping("m", {"latency_budget": "20ms", "trials": 2}, flags={"max_error_rate": "1"})


def test_the_values_asked_for_bound_the_queue_knobs_and_a_bad_label_names_the_key():
    from perfkit.errors import InputError

    space = TuneSpace.from_mapping({"max_queue_sizes": "0,5", "queue_timeouts": "none,reject:40000"})
    cfg = read_config(FIXTURES / "batcher" / "config.pbtxt")
    rs = resolve(
        dataclasses_replace(space, dynamic_batching=(True,)), cfg, FIXTURES / "batcher",
        latency_budget_us=BUDGET_US, max_error_rate=0.05,
    )  # fmt: skip
    assert rs.dimension("max_queue_size").choices == (0, 5)
    assert rs.dimension("queue_timeout").choices == ("none", "reject:40000")
    with pytest.raises(InputError, match="queue_timeouts"):
        TuneSpace.from_mapping({"queue_timeouts": "reject:soon"})

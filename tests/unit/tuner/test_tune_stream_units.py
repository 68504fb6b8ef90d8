"""Tuning decoupled (streamed) and sequence models without a server: the budget's metric,
judging levels by TTFT/ITL, level-by-level load finding, the sequence batcher's space and the
validator's sequence rules."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from perfkit.errors import CandidateRejectedError, InputError, UsageError
from perfkit.records import (
    Budget,
    LatencySummary,
    LevelResult,
    LoadLevel,
    Precision,
    ProfileSpec,
    RunRecord,
    StreamingSummary,
    TuneRecord,
    parse_latency_budget,
)
from perfkit.server.modelconfig import parse_config, read_config
from perfkit.tuner import TuneSettings, TuneSpace, apply_params, judge_trial, resolve
from perfkit.tuner._find_load import TrialLoadSettings, find_load
from perfkit.tuner._space import candidate_points, extract_params
from perfkit.tuner._validate import Context, validate

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "fixtures" / "models"


# -- the budget's metric ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("20ms", ("latency", 20.0)),
        (20, ("latency", 20.0)),
        ("ttft:300ms", ("ttft", 300.0)),
        ("TTFT:0.3s", ("ttft", 300.0)),
        ("itl:20ms", ("itl", 20.0)),
        ("latency:5ms", ("latency", 5.0)),
    ],
)
def test_latency_budget_names_its_metric(text, expected):
    metric, ms = parse_latency_budget(text)
    assert metric == expected[0] and ms == pytest.approx(expected[1])


@pytest.mark.parametrize(("text", "match"), [("tpot:5ms", "unknown metric 'tpot'"), ("ttft:", "not a number")])
def test_a_bad_latency_budget_is_a_one_line_usage_error(text, match):
    with pytest.raises(UsageError, match=match):
        parse_latency_budget(text)


def test_cli_rejects_an_unknown_budget_metric_with_exit_code_2(capsys):
    from perfkit.cli import main

    code = main(["tune", "-m", "streamer", "--model-repository", str(FIXTURES), "--latency-budget", "tpot:5ms"])
    err = capsys.readouterr().err
    assert code == 2 and "tpot" in err and "Traceback" not in err


def test_sweep_file_budget_carries_its_metric():
    s = TuneSettings.from_mapping("streamer", {"latency_budget": "itl:20ms", "trials": 2})
    assert (s.budget.metric, s.budget.latency_budget_ms) == ("itl", pytest.approx(20.0))
    assert TuneSettings.from_mapping("m", {"latency_budget": "20ms"}).budget.metric == "latency"


def test_old_tune_records_read_as_end_to_end_latency_budgets():
    data = json.loads((ROOT / "fixtures" / "records" / "tune" / "tune.json").read_text())
    data.pop("budget_metric", None)
    assert TuneRecord.from_dict(data).budget.metric == "latency"


# -- judging levels by the stream's figures ---------------------------------------------------------
def _lat(p99_ms: float, kind: str = "service") -> LatencySummary:
    us = p99_ms * 1e3
    return LatencySummary(kind, 100, 1, us, us / 2, 0, us / 2, us, us, us, us, "")  # type: ignore[arg-type]  # test data


def _stream_level(c: int, tput: float, e2e_ms: float, ttft_ms: float, itl_ms: float) -> LevelResult:
    st = StreamingSummary(
        ttft=_lat(ttft_ms), itl=_lat(itl_ms), second_token=_lat(itl_ms), output_len_mean=16, output_len_p50=16,
        output_len_p99=16, output_len_max=16, responses_per_s=tput * 16, output_tokens_per_s=tput * 16,
        request_count=100,
    )  # fmt: skip
    return LevelResult(
        LoadLevel("concurrency", c), 1, True, Precision(None, None), 1, 100, 100, tput, tput, tput, 0, {},
        0, 0, None, _lat(e2e_ms), None, (), streaming=st,
    )  # fmt: skip


def _run(*levels: LevelResult) -> RunRecord:
    return RunRecord("0", "now", (), {}, {}, {}, {}, tuple(levels))  # type: ignore[arg-type]  # only levels are read


def test_a_ttft_budget_is_judged_on_the_ttft_percentile_not_the_request_latency():
    # every request takes ~100 ms end to end (16 tokens), but its first token comes much sooner
    run = _run(_stream_level(1, 10, 100, 20, 5), _stream_level(2, 18, 110, 40, 6), _stream_level(4, 30, 150, 90, 8))
    v = judge_trial(run, latency_budget_ms=50, percentile=99, metric="ttft")
    assert v.feasible_load == LoadLevel("concurrency", 2)
    assert v.latency_us == pytest.approx(40_000)
    assert v.metrics["output_tokens_per_s"] == pytest.approx(18 * 16)
    # the same record against an end-to-end budget of 50 ms: nothing fits
    assert judge_trial(run, latency_budget_ms=50, percentile=99).feasible_load is None
    itl = judge_trial(run, latency_budget_ms=7, percentile=99, metric="itl")
    assert itl.feasible_load == LoadLevel("concurrency", 2) and itl.latency_us == pytest.approx(6_000)


def test_a_stream_budget_on_a_level_without_stream_figures_is_never_met():
    level = dataclasses.replace(_stream_level(1, 10, 1, 1, 1), streaming=None)
    v = judge_trial(_run(level), latency_budget_ms=50, percentile=99, metric="ttft")
    assert v.feasible_load is None and v.lowest_over_budget


def test_a_stream_budget_spec_streams_and_leaves_no_end_to_end_threshold_to_measure():
    trial_load = TrialLoadSettings(budget=Budget(300, metric="ttft"), streaming=True, stop_when_decided=True)
    spec = trial_load.spec("streamer", (LoadLevel("concurrency", 1.0), LoadLevel("concurrency", 2.0)), bisect=True)
    assert spec.streaming and spec.protocol == "grpc"
    assert spec.latency_threshold_ms is None and not spec.binary_search and not spec.stop_when_decided
    plain = TrialLoadSettings(budget=Budget(20), stop_when_decided=True).spec("batcher", bisect=True)
    assert plain.latency_threshold_ms == 20 and plain.binary_search and not plain.streaming


def test_stream_budget_loads_are_measured_one_level_at_a_time_up_to_the_first_over_budget():
    # TTFT grows 15 ms per stream in flight: within a 50 ms budget up to concurrency 3
    asked: list[tuple[float, ...]] = []

    def measure(server, spec: ProfileSpec, **kw):
        values = tuple(lv.value for lv in spec.levels)
        asked.append(values)
        c = int(values[0])
        return _run(_stream_level(c, 10 * c, 500, 15.0 * c, 5))

    trial_load = TrialLoadSettings(budget=Budget(50, metric="ttft"), streaming=True, max_concurrency=8)
    rec = find_load(measure, None, trial_load, "streamer", None)  # type: ignore[arg-type]  # the fake measure needs no server
    assert asked == [(1.0,), (2.0,), (4.0,)]  # 4 is over the TTFT budget: 8 is never measured
    assert [int(lv.load.value) for lv in rec.levels] == [1, 2, 4]
    assert judge_trial(rec, latency_budget_ms=50, percentile=99, metric="ttft").feasible_load == LoadLevel(
        "concurrency", 2.0
    )
    asked.clear()
    # an earlier trial met the budget at 2: the search walks up from it a level per run, and the
    # level over the budget that the answer rests on is measured twice
    bisected = find_load(measure, None, trial_load, "streamer", 2)  # type: ignore[arg-type]  # as above
    assert asked == [(2.0,), (3.0,), (4.0,), (4.0,)]
    assert judge_trial(bisected, latency_budget_ms=50, percentile=99, metric="ttft").feasible_load == LoadLevel(
        "concurrency", 3.0
    )


def test_a_stream_budget_on_a_model_that_does_not_stream_is_refused(tmp_path: Path):
    from perfkit.server.base import Endpoints, Server
    from perfkit.tuner import tune

    repo = tmp_path / "models"
    shutil.copytree(FIXTURES / "batcher", repo / "batcher", ignore=shutil.ignore_patterns("__pycache__"))
    settings = TuneSettings(model="batcher", budget=Budget(300, metric="ttft"), trials=1,
                            output_dir=tmp_path / "out")  # fmt: skip
    with pytest.raises(UsageError, match="not decoupled"):
        tune(Server(Endpoints("127.0.0.1", 1, None, None)), settings, TuneSpace(), model_repository=repo)
    assert not (tmp_path / "out").exists()


# -- the spaces of decoupled and sequence models ------------------------------------------------------
def _fixture_space(name: str):
    cfg = read_config(FIXTURES / name / "config.pbtxt")
    return cfg, resolve(TuneSpace(), cfg, FIXTURES / name, latency_budget_us=300_000)


def test_the_streaming_fixture_is_tuned_by_instance_count():
    _, rs = _fixture_space("streamer")
    assert rs.refused is None
    assert [d.name for d in rs.dimensions] == ["instance_count"]  # max_batch_size 0: no batcher to search
    assert any("decoupled" in n for n in rs.notes)


def test_a_decoupled_python_model_with_a_batch_dimension_searches_dynamic_batching(tmp_path: Path):
    # Triton's dynamic batcher serves decoupled models too (server docs/user_guide/decoupled_models.md;
    # python_backend README, Decoupled mode: execute receives a batch of requests).
    text = 'name: "m" backend: "python" max_batch_size: 8 model_transaction_policy { decoupled: true }'
    (tmp_path / "m" / "1").mkdir(parents=True)
    rs = resolve(TuneSpace(), parse_config(text), tmp_path / "m", latency_budget_us=300_000)
    assert rs.dimension("dynamic_batching") is not None and rs.dimension("instance_count") is not None


@pytest.mark.parametrize("name", ["accumulator", "accumulator_oldest"])
def test_sequence_models_search_the_sequence_batcher_and_never_dynamic_batching(name: str):
    cfg, rs = _fixture_space(name)
    names = {d.name for d in rs.dimensions}
    assert {"sequence_strategy", "max_sequence_idle_us", "sequence_max_queue_delay_us"} <= names
    assert {"max_candidate_sequences", "sequence_preferred_batch_sizes"} <= names
    assert not names & {"dynamic_batching", "max_queue_delay_us", "preferred_batch_sizes"}
    points = candidate_points(rs, limit=60)
    changed = 0
    for point in points:
        candidate = apply_params(cfg, point, rs)
        assert candidate.WhichOneof("scheduling_choice") == "sequence_batching"
        changed += candidate.sequence_batching != cfg.sequence_batching
    assert changed > len(points) // 2


def test_switching_the_sequence_strategy_keeps_the_queue_delay_and_sets_oldest_knobs():
    cfg, rs = _fixture_space("accumulator")  # direct
    params = {"sequence_strategy": "oldest", "sequence_max_queue_delay_us": 700, "max_candidate_sequences": 16,
              "sequence_preferred_batch_sizes": "pow2", "max_sequence_idle_us": 5_000_000}  # fmt: skip
    new = apply_params(cfg, params, rs)
    sb = new.sequence_batching
    assert sb.WhichOneof("strategy_choice") == "oldest"
    assert (sb.oldest.max_queue_delay_microseconds, sb.oldest.max_candidate_sequences) == (700, 16)
    assert list(sb.oldest.preferred_batch_size) == [2, 4] and sb.max_sequence_idle_microseconds == 5_000_000
    assert list(sb.control_input) == list(cfg.sequence_batching.control_input)  # controls untouched
    assert extract_params(new, backend="python") | params == extract_params(new, backend="python")
    back = apply_params(new, {"sequence_strategy": "direct"}, rs)
    assert back.sequence_batching.WhichOneof("strategy_choice") == "direct"
    assert back.sequence_batching.direct.max_queue_delay_microseconds == 700


# -- the validator's sequence rules ---------------------------------------------------------------
def test_a_sequence_model_candidate_with_dynamic_batching_is_rejected():
    cfg, rs = _fixture_space("accumulator")
    with pytest.raises(CandidateRejectedError, match="sequence-batcher-kept"):
        apply_params(cfg, {"dynamic_batching": True}, rs)
    both = parse_config('name: "m" max_batch_size: 4 dynamic_batching { }')
    broken = validate(both, Context("python", sequence=True))
    assert [v.rule for v in broken] == ["sequence-batcher-kept"]
    assert validate(both, Context("python")) == []  # a model that never had a sequence batcher


def test_sequence_rules_follow_triton_core():
    over = parse_config('name: "m" max_batch_size: 2 sequence_batching { oldest { preferred_batch_size: [4] } }')
    assert [v.rule for v in validate(over, Context("python", sequence=True))] == ["sequence-preferred-le-mbs"]
    util = parse_config('name: "m" max_batch_size: 2 sequence_batching { direct { minimum_slot_utilization: 1.5 } }')
    assert [v.rule for v in validate(util, Context("python", sequence=True))] == ["sequence-direct-slot-utilization"]
    ok = parse_config('name: "m" max_batch_size: 4 sequence_batching { oldest { preferred_batch_size: [2, 4] } }')
    assert validate(ok, Context("python", sequence=True)) == []


def test_dry_run_shows_the_decoupled_and_sequence_spaces(capsys):
    from perfkit.cli import main

    args = ["tune", "--model-repository", str(FIXTURES), "--dry-run", "--latency-budget"]
    assert main([*args, "ttft:300ms", "-m", "streamer"]) == 0
    out = capsys.readouterr().out
    assert "decoupled" in out and "candidate configs" in out
    assert main([*args, "20ms", "-m", "accumulator_oldest"]) == 0
    out = capsys.readouterr().out
    assert "sequence_strategy" in out and "max_candidate_sequences" in out and "dynamic_batching=" not in out
    assert main([*args, "itl:5ms", "-m", "batcher"]) == 2
    assert "not decoupled" in capsys.readouterr().err


def test_the_settings_hold_one_budget_from_a_table_or_from_the_flags():
    """A [tune] table's latency_budget and percentile, or the budget the flags parsed (a mix's per-model
    budgets too) held to --percentile: one Budget, the one the load search and the verdicts read."""
    from perfkit.tuner import parse_budget

    table = TuneSettings.from_mapping("streamer", {"latency_budget": "ttft:300ms", "percentile": 90, "trials": 1})
    assert table.budget == Budget(300.0, 90.0, "ttft")
    parsed, mix = parse_budget(["a", "b"], "a:20ms,b:50ms", "a:3,b:1")
    flags = TuneSettings.from_mapping("a", {}, flags={"percentile": 95.0}, budget=parsed, mix=mix)
    assert flags.budget == Budget(20.0, 95.0, "latency", (("a", 20.0), ("b", 50.0)))
    assert flags.trial_load_settings(None).budget is flags.budget
    with pytest.raises(InputError, match="percentile"):
        TuneSettings.from_mapping("m", {"latency_budget": "20ms", "percentile": "high"})

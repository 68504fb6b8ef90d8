"""The gate's statistics and verdicts on synthetic records with a known truth."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from perfkit.errors import ExitCode, InputError, UsageError
from perfkit.gate import (
    DEFAULT_JOB_NOISE_PCT,
    GateOptions,
    GateRefused,
    compare_records,
    min_samples,
    parse_job_noise,
    parse_threshold,
    parse_thresholds,
)
from perfkit.gate.merge import merge_runs
from perfkit.gate.stats import bootstrap_rel_diff
from perfkit.gate.synthetic import MACHINE, synthetic_level, synthetic_record

# Generous windows: enough latency samples per level for p99 to be certifiable.
WIN = {"windows": 8, "window_s": 1.5, "noise": 0.03}
# Synthetic records carry one job's window noise and no job factor: judged as from one job
# (no job-to-job allowance), the within-run statistics are what these tests check.
NO_JOB_NOISE = parse_job_noise(["all:0%"])
ONE_JOB = GateOptions(job_noise_pct=NO_JOB_NOISE)


def _verdicts(result):
    return {(f.level, f.metric): f.verdict for f in result.findings}


def test_min_samples_matches_mlperf_early_stopping():
    assert min_samples(99) == 662
    assert min_samples(90) == 64
    assert 6000 < min_samples(99.9) < 7000
    assert min_samples(50) < 20


def test_bootstrap_is_seeded_and_centred():
    rng = np.random.default_rng(1)
    b, c = rng.normal(100, 3, 8), rng.normal(90, 3, 8)
    one, two = bootstrap_rel_diff(b, c, seed=7), bootstrap_rel_diff(b, c, seed=7)
    assert np.array_equal(one.shifts, two.shifts)
    assert abs(float(np.mean(one.shifts))) < 0.005
    lo, hi = one.interval(one.observed_rel, 0.95)
    assert lo < one.observed_rel < hi < 0
    with pytest.raises(ValueError):
        bootstrap_rel_diff(b[:1], c)


def test_same_config_passes():
    base = synthetic_record(seed=1, **WIN)
    cur = synthetic_record(seed=11, **WIN)
    result = compare_records(base, cur)
    assert result.verdict == "pass" and result.exit_code == ExitCode.OK
    assert {f.metric for f in result.findings} == {"throughput", "p99"}  # the defaults
    assert all(f.ci_pct is not None and f.confidence is not None for f in result.findings)


def test_thirty_percent_slower_is_a_regression_naming_the_metric():
    result = compare_records(synthetic_record(seed=1, **WIN), synthetic_record(seed=2, offset=1.3, **WIN), ONE_JOB)
    assert result.verdict == "regression" and result.exit_code == ExitCode.GATE_REGRESSION
    p99 = next(f for f in result.findings if f.metric == "p99" and f.level == "concurrency 4")
    assert p99.verdict == "regression"
    assert 25 < p99.delta_pct < 35  # type: ignore[operator]  # a judged finding always has delta_pct
    assert p99.confidence is not None and p99.confidence > 0.99
    assert p99.ci_pct is not None and p99.ci_pct[0] > 0
    assert "p99" in p99.reason and "higher" in p99.reason
    tput = next(f for f in result.findings if f.metric == "throughput" and f.level == "concurrency 1")
    assert tput.verdict == "regression" and tput.delta_pct < -15  # type: ignore[operator]  # a judged finding always has delta_pct


def test_a_stored_baseline_allows_for_two_jobs_noise_and_ab_does_not():
    # A stored baseline comes from another job, whose own speed (neighbours, a noise episode
    # lasting a whole level) the windows cannot see: p99 moved +32% between two unchanged runs
    # of the sleeper fixture on a shared 2-core runner. A/B measures both arms in one job.
    base, cur = synthetic_record(seed=1, **WIN), synthetic_record(seed=2, offset=1.3, **WIN)
    p99_only = tuple(parse_thresholds(["p99:+10%"]))
    stored = compare_records(base, cur, GateOptions(thresholds=p99_only))
    assert stored.verdict == "pass"
    f = next(f for f in stored.findings if f.level == "concurrency 4")
    assert f.past_threshold and f.explained and "within the noise between two jobs" in f.reason
    assert "±15% per job for p99" in f.reason and "gate --ab" in f.reason
    assert any("job-to-job noise allowed" in n and "p99 ±15%" in n for n in stored.notes)
    ab = compare_records(base, cur, GateOptions(thresholds=p99_only), comparison="ab")
    assert ab.verdict == "regression" and not any("job-to-job" in n for n in ab.notes)
    # the allowance widens the interval, never moves the estimate
    f_ab = next(f for f in ab.findings if f.level == "concurrency 4")
    assert f.delta_pct == f_ab.delta_pct
    assert f.ci_pct[0] < f_ab.ci_pct[0] and f.ci_pct[1] > f_ab.ci_pct[1]  # type: ignore[index]  # judged findings carry an interval
    # a stored baseline still catches what two jobs' noise cannot explain
    worse = compare_records(base, synthetic_record(seed=2, offset=1.8, **WIN), GateOptions(thresholds=p99_only))
    assert next(f for f in worse.findings if f.level == "concurrency 4").verdict == "regression"


def test_job_noise_parsing():
    noise = parse_job_noise(["p99:5%", "throughput:1.5%", "ttft:2%"])
    assert (noise["p99"], noise["throughput"], noise["ttft_p99"]) == (5.0, 1.5, 2.0)
    assert noise["p50"] == DEFAULT_JOB_NOISE_PCT["p50"]  # the rest keep their defaults
    assert set(parse_job_noise(["all:0%", "p999:1%"]).values()) == {0.0, 1.0}
    for bad, words in [("p99", "is not METRIC:PERCENT%"), ("p99:5", "is not"), ("p98:1%", "unknown metric")]:
        with pytest.raises(UsageError, match=words):
            parse_job_noise([bad])


def test_faster_is_an_improvement_and_does_not_fail():
    result = compare_records(synthetic_record(seed=1, **WIN), synthetic_record(seed=2, offset=0.7, **WIN), ONE_JOB)
    assert set(_verdicts(result).values()) == {"improvement"}
    assert result.exit_code == ExitCode.OK


def test_change_past_threshold_but_within_noise_is_inconclusive_and_says_how_much_more():
    noisy = {"windows": 4, "noise": 0.25, "window_s": 3.0}
    result = compare_records(synthetic_record(seed=1, **noisy), synthetic_record(seed=5, offset=1.12, **noisy))
    inconclusive = [f for f in result.findings if f.verdict == "inconclusive"]
    assert inconclusive, _verdicts(result)
    assert result.exit_code in (ExitCode.GATE_INCONCLUSIVE, ExitCode.GATE_REGRESSION)
    f = inconclusive[0]
    assert f.more_windows is not None and f.more_windows >= 1
    assert f"about {f.more_windows} more windows" in f.reason


def test_too_few_windows_cannot_convict():
    result = compare_records(
        synthetic_record(seed=1, windows=1, window_s=12.0),
        synthetic_record(seed=2, windows=1, window_s=12.0, offset=1.5),
    )
    assert {f.verdict for f in result.findings} == {"inconclusive"}
    assert all(f.more_windows for f in result.findings)


def test_small_change_within_threshold_passes_even_when_significant():
    result = compare_records(
        synthetic_record(seed=1, windows=10, noise=0.005, window_s=1.0),
        synthetic_record(seed=2, windows=10, noise=0.005, window_s=1.0, offset=1.03),
    )
    assert result.verdict == "pass"


def test_p99_with_too_few_samples_is_invalid():
    short = {"windows": 3, "window_s": 0.2}  # ~60 requests at concurrency 1: not enough for a p99
    result = compare_records(synthetic_record(seed=1, **short), synthetic_record(seed=2, **short))
    p99 = next(f for f in result.findings if f.metric == "p99" and f.level == "concurrency 1")
    assert p99.verdict == "invalid" and "662" in p99.reason and "MLPerf" in p99.reason
    assert result.exit_code == ExitCode.GATE_INVALID


def test_thin_percentile_is_invalid():
    levels = [synthetic_level(count=5000, thin=("p99",), **WIN)]
    result = compare_records(synthetic_record(levels), synthetic_record([synthetic_level(seed=3, **WIN)]))
    assert _verdicts(result)[("concurrency 1", "p99")] == "invalid"


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [({"errors": 500}, "errors"), ({"dropped": 500}, "dropped"), ({"late": 2000}, "late")],
)
def test_errors_and_late_or_dropped_sends_are_invalid(kwargs, words):
    base = synthetic_record(seed=1, **WIN)
    cur = synthetic_record(seed=2, **WIN, **kwargs)
    result = compare_records(base, cur)
    assert result.verdict == "invalid"
    assert all(words in f.reason for f in result.findings)


def test_failed_run_is_invalid():
    cur = dataclasses.replace(synthetic_record(seed=2, **WIN), status="failed", error="server died")
    assert compare_records(synthetic_record(seed=1, **WIN), cur).verdict == "invalid"


def test_regression_outranks_invalid_and_inconclusive():
    base = synthetic_record(seed=1, **WIN)
    cur = synthetic_record(
        [synthetic_level(concurrency=1, seed=2, errors=900, **WIN), synthetic_level(concurrency=4, offset=1.5, **WIN)]
    )
    result = compare_records(base, cur)
    assert {f.verdict for f in result.findings} == {"invalid", "regression"}
    assert result.exit_code == ExitCode.GATE_REGRESSION


def test_open_loop_uses_the_corrected_latency_and_says_so():
    base = synthetic_record(seed=1, open_loop=True, **WIN)
    result = compare_records(base, synthetic_record(seed=2, open_loop=True, **WIN))
    assert {f.latency_kind for f in result.findings if f.metric == "p99"} == {"corrected"}
    closed = compare_records(synthetic_record(seed=1, **WIN), synthetic_record(seed=2, **WIN))
    assert {f.latency_kind for f in closed.findings if f.metric == "p99"} == {"service"}


def test_absolute_thresholds():
    opts = GateOptions(thresholds=tuple(parse_thresholds(["p99:+5ms"])), job_noise_pct=NO_JOB_NOISE)
    result = compare_records(synthetic_record(seed=1, **WIN), synthetic_record(seed=2, offset=1.3, **WIN), opts)
    # 10 ms service x 1.3 p99 factor: +30% is about +3.9 ms, under 5 ms
    assert {f.verdict for f in result.findings} == {"pass"}
    opts = GateOptions(thresholds=tuple(parse_thresholds(["p99:+2ms"])), job_noise_pct=NO_JOB_NOISE)
    result = compare_records(synthetic_record(seed=1, **WIN), synthetic_record(seed=2, offset=1.3, **WIN), opts)
    assert {f.verdict for f in result.findings} == {"regression"}


def test_threshold_parsing():
    t = parse_threshold("throughput:-5%")
    assert (t.metric, t.kind, t.value) == ("throughput", "pct", 5.0)
    assert parse_threshold("p99:+2ms").value == 2000.0
    assert parse_threshold("p99:+250us").value == 250.0
    assert parse_threshold("p99.9:10%").metric == "p999"
    assert parse_threshold("throughput:-50/s").kind == "abs"
    assert [t.metric for t in parse_thresholds([])] == ["throughput", "p99"]
    assert [t.text for t in parse_thresholds(["p99:+10%", "p99:+20%"])] == ["p99:+20%"]
    for bad, words in [
        ("p99", "is not METRIC"),
        ("p98:+1%", "unknown metric"),
        ("throughput:+5%", "drop"),
        ("p99:-5%", "rise"),
        ("p99:+5", "needs a unit"),
        ("throughput:-5ms", "infer/s"),
    ]:
        with pytest.raises(UsageError, match=words):
            parse_threshold(bad)


def test_different_load_is_refused_unless_allowed():
    base = synthetic_record(seed=1, **WIN)
    cur = synthetic_record([synthetic_level(concurrency=1, seed=2, **WIN), synthetic_level(concurrency=8, **WIN)])
    with pytest.raises(GateRefused, match="load differs.*concurrency 4") as err:
        compare_records(base, cur)
    assert err.value.exit_code == ExitCode.GATE_INVALID
    result = compare_records(base, cur, GateOptions(allow_different_load=True))
    assert {f.level for f in result.findings} == {"concurrency 1"}
    assert any("load differs" in n for n in result.notes)
    with pytest.raises(GateRefused, match="protocol"):
        compare_records(base, synthetic_record(seed=2, protocol="grpc", **WIN))
    batched = synthetic_record([synthetic_level(batch_size=4, **WIN), synthetic_level(concurrency=4, **WIN)])
    with pytest.raises(GateRefused, match="batch 4"):
        compare_records(base, batched)


def test_different_machine_is_refused_unless_allowed():
    base = synthetic_record(seed=1, **WIN)
    other = synthetic_record(seed=2, machine=dataclasses.replace(MACHINE, cpu_count=64), **WIN)
    with pytest.raises(GateRefused, match="machine differs.*cpu_count"):
        compare_records(base, other)
    result = compare_records(base, other, GateOptions(allow_different_machine=True))
    assert any("cpu_count" in n for n in result.notes)
    # another CI runner of the same kind (only the hostname differs) is the same machine
    same_kind = synthetic_record(seed=2, machine=dataclasses.replace(MACHINE, hostname="runner-42"), **WIN)
    assert compare_records(base, same_kind).verdict == "pass"


def test_changed_config_and_server_are_compared_and_shown():
    base = synthetic_record(seed=1, **WIN)
    cur = synthetic_record(seed=2, server_version="2.52.0", config={"name": "sleeper", "max_batch_size": 16}, **WIN)
    result = compare_records(base, cur)
    assert result.findings
    assert "server version 2.51.0 -> 2.52.0" in result.changes
    assert "config max_batch_size: 8 -> 16" in result.changes


def test_another_model_is_an_input_error():
    with pytest.raises(InputError, match="model 'batcher'"):
        compare_records(synthetic_record(model="batcher", **WIN), synthetic_record(**WIN))


def test_ab_rounds_pool_windows_and_counts():
    rounds = [synthetic_record(seed=s, **WIN) for s in (1, 2, 3)]
    merged = merge_runs(rounds)
    lv = merged.levels[0]
    assert len(lv.windows) == 3 * WIN["windows"]
    assert lv.request_count == sum(r.levels[0].request_count for r in rounds)
    assert lv.service.count == sum(r.levels[0].service.count for r in rounds)
    assert lv.duration_s == pytest.approx(3 * 12.0)

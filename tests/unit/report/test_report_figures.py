"""Report figure data from the committed fixture records: the numbers drawn are the records' numbers."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hdrh.histogram import HdrHistogram

from perfkit.errors import InputError
from perfkit.gate import GateOptions, parse_job_noise
from perfkit.records import RunRecord, TuneRecord
from perfkit.report import _compare as C
from perfkit.report import _figures as F
from perfkit.report import _tune as T
from perfkit.report import load_inputs

RECORDS = Path(__file__).resolve().parents[3] / "fixtures" / "records"


@pytest.fixture(scope="module")
def conc() -> RunRecord:
    return RunRecord.load(RECORDS / "profile_concurrency.json")


@pytest.fixture(scope="module")
def rate() -> RunRecord:
    return RunRecord.load(RECORDS / "profile_rate.json")


@pytest.fixture(scope="module")
def tune() -> TuneRecord:
    _, tunes = load_inputs([RECORDS / "tune"])
    return tunes[0]


def _series(fig: F.LineFigure, label: str) -> F.Series:
    return next(s for s in fig.series if s.label == label)


def test_throughput_latency_points_are_the_records_values(conc):
    fig = F.throughput_latency([conc])
    assert {s.label for s in fig.series} == {"p50 service", "p99 service"}
    assert _series(fig, "p50 service").points == tuple(
        (lv.throughput_infer_per_s, lv.service.p50_us / 1000) for lv in conc.levels
    )
    assert _series(fig, "p99 service").points == tuple(
        (lv.throughput_infer_per_s, lv.service.p99_us / 1000) for lv in conc.levels
    )


def test_open_loop_curve_has_service_and_corrected_and_goes_log_when_overloaded(rate):
    fig = F.throughput_latency([rate])
    assert {s.label for s in fig.series} == {"p50 service", "p99 service", "p50 corrected", "p99 corrected"}
    corrected = _series(fig, "p99 corrected").points
    assert corrected == tuple((lv.throughput_infer_per_s, lv.corrected.p99_us / 1000) for lv in rate.levels)
    # Corrected latency includes waiting to be sent: never below service latency.
    for (_, c), (_, s) in zip(corrected, _series(fig, "p99 service").points):
        assert c >= s
    # The overloaded last level is ~50x the first: a linear axis would flatten everything else.
    assert fig.y_log


def test_cdf_is_monotone_ends_at_max_and_agrees_with_percentiles(conc, rate):
    for rec in (conc, rate):
        for lv in rec.levels:
            for summary in filter(None, (lv.service, lv.corrected)):
                pts = F.cdf_points(summary)
                xs = [x for x, _ in pts]
                ys = [y for _, y in pts]
                assert xs == sorted(xs) and ys == sorted(ys)
                assert ys[-1] == 1.0
                hist = HdrHistogram.decode(summary.histogram)
                assert xs[-1] == hist.get_max_value() / 1000
                assert xs[-1] == pytest.approx(summary.max_us / 1000, rel=1e-3)
                assert len(pts) <= F.CDF_MAX_POINTS + 120  # thinned, tail kept
                # The fraction at p50/p99 read off the curve matches the percentile summary.
                for pct, value_us in ((50, summary.p50_us), (99, summary.p99_us)):
                    below = [y for x, y in pts if x < value_us / 1000 * 0.999]
                    at_or_below = [y for x, y in pts if x <= value_us / 1000 * 1.001]
                    assert (below[-1] if below else 0.0) <= pct / 100 + 0.01
                    assert at_or_below[-1] >= pct / 100 - 0.01


def test_cdf_marks_each_levels_percentiles(conc):
    fig = F.latency_cdf(conc, "service")
    assert [s.label for s in fig.series] == [lv.load.label for lv in conc.levels]
    first = conc.levels[0]
    marks = [m for m in fig.marks if m.group == first.load.label]
    assert {(m.label, m.x, m.y) for m in marks} == {
        ("p50", first.service.p50_us / 1000, 0.5),
        ("p90", first.service.p90_us / 1000, 0.9),
        ("p99", first.service.p99_us / 1000, 0.99),
        ("p99.9", first.service.p999_us / 1000, 0.999),
    }


def test_undecodable_histogram_is_an_input_error(conc):
    bad = dataclasses.replace(conc.levels[0].service, histogram="not-a-histogram")
    with pytest.raises(InputError, match="cannot be decoded"):
        F.cdf_points(bad)


def test_server_breakdown_and_batch_sizes_are_the_server_stats(conc):
    fig, table = F.server_breakdown(conc)
    by = {s.label: s.values for s in fig.series}
    assert by["queue"] == tuple(lv.server.queue_avg_us / 1000 for lv in conc.levels)
    assert by["compute infer"] == tuple(lv.server.compute_infer_avg_us / 1000 for lv in conc.levels)
    assert fig.stacked and fig.categories == tuple(lv.load.label for lv in conc.levels)
    assert [r[0] for r in table.rows] == list(fig.categories)

    bfig, btable = F.batch_sizes(conc)
    for i, lv in enumerate(conc.levels):
        shares = [s.values[i] for s in bfig.series]
        assert sum(shares) == pytest.approx(100.0)
        counts = lv.server.batch_sizes
        row = btable.rows[i]
        assert row[1] == sum(counts.values())
        assert row[2] == pytest.approx(sum(int(k) * v for k, v in counts.items()) / sum(counts.values()))


def test_no_server_stats_or_metrics_means_no_figure(conc):
    bare = dataclasses.replace(
        conc, levels=tuple(dataclasses.replace(lv, server=None, metrics=()) for lv in conc.levels)
    )
    assert F.server_breakdown(bare) is None
    assert F.batch_sizes(bare) is None
    assert F.gpu_timeline(bare) is None


def test_gpu_timeline_covers_every_sample(conc):
    util, mem, table = F.gpu_timeline(conc)
    samples = [m for lv in conc.levels for m in lv.metrics]
    assert len(table.rows) == len(samples)
    assert [y for _, y in util.series[0].points] == [m.utilization * 100 for m in samples]
    assert [y for _, y in mem.series[0].points] == [m.memory_used_bytes / 2**30 for m in samples]
    xs = [x for x, _ in util.series[0].points]
    assert xs == sorted(xs)
    assert len(util.vlines) == len(conc.levels)


def test_quality_table_flags_unstable_errors_late_and_dropped(rate):
    table = F.quality_table(rate)
    last = table.rows[-1]
    lv = rate.levels[-1]
    assert last[1] == "NO" and not lv.stable
    assert last[5] == lv.error_count > 0
    assert last[7] == lv.late_count and last[8] == lv.dropped_count > 0
    assert table.cell_classes[-1][1] == "bad" and table.cell_classes[-1][8] == "bad"
    assert table.rows[0][2] == pytest.approx(rate.levels[0].precision.throughput_rel * 100)


def test_recommendation_sentence(tune):
    assert T.recommendation(tune) == (
        "Best: trial 7 (max_batch_size 8, dynamic batching with 500 µs queue delay, 2 instances, fp16) gives "
        "1,840 infer/s at p99 14.2 ms, 3.1× the original config's 590 infer/s, within the 20 ms budget."
    )


def test_a_gain_over_an_original_measured_only_at_its_prediction_is_an_upper_bound(tune):
    from perfkit.records import M_LOWER_BOUND
    from perfkit.tuner._record import summary

    trials = tuple(
        dataclasses.replace(t, metrics={**t.metrics, M_LOWER_BOUND: 1.0}) if t.is_original else t for t in tune.trials
    )
    held = dataclasses.replace(tune, trials=trials)
    assert T.original_trial(held).rate_is_lower_bound and not T.original_trial(tune).rate_is_lower_bound
    assert "at most 3.1× the original config's 590 infer/s (the rate it held where it was predicted" in (
        T.recommendation(held)
    )
    lines = summary(held, Path(".")).lines
    assert any("at most +212% vs the original (at least 590.0 infer/s" in line for line in lines), lines


def test_recommendation_without_a_feasible_trial(tune):
    over_budget = tuple(dataclasses.replace(t, feasible=False) for t in tune.trials)
    none = dataclasses.replace(
        tune, trials=over_budget, best_trial=None, best_config=None, status="failed", error="server died"
    )
    text = T.recommendation(none)
    assert text.startswith("No recommendation: none of 12 trials") and "20 ms p99" in text and "server died" in text
    assert T.config_diff(none) == ()


def test_trial_history_groups_every_trial_once(tune):
    thr, lat = T.trial_history(tune)
    seen = sorted(int(x) for s in thr.series for x, _ in s.points)
    assert seen == sorted(t.number for t in tune.trials)
    groups = {s.group: {int(x) for x, _ in s.points} for s in thr.series}
    assert groups["failed"] == {4} and groups["pruned"] == {9} and groups["over budget"] == {3, 10}
    assert lat.hlines == ((20.0, "budget 20 ms"),)
    assert {m.label for m in thr.marks} == {"best", "original"}


def test_pareto_front_given_and_computed_agree(tune):
    computed = T.pareto_front(dataclasses.replace(tune, pareto_trials=()))
    assert computed == tune.pareto_trials
    # No trial on the front is dominated by another measured trial.
    done = [t for t in tune.trials if t.throughput_infer_per_s and t.latency_us]
    for n in computed:
        t = next(x for x in done if x.number == n)
        assert not any(
            o.throughput_infer_per_s > t.throughput_infer_per_s and o.latency_us < t.latency_us for o in done
        )
    fig = T.pareto_figure(tune)
    front = next(s for s in fig.series if s.group == "front")
    assert [x for x, _ in front.points] == sorted(x for x, _ in front.points)
    assert len(front.points) == len(computed)


def test_importances_largest_first(tune):
    fig = T.importance_figure(tune)
    assert fig.categories[0] == "dynamic_batching"
    assert list(fig.series[0].values) == sorted(tune.importances.values(), reverse=True)
    assert T.importance_figure(dataclasses.replace(tune, importances={})) is None


def test_config_diff_shows_the_changes(tune):
    lines = T.config_diff(tune)
    added = {d.text for d in lines if d.kind == "add"}
    removed = {d.text for d in lines if d.kind == "del"}
    assert "+dynamic_batching {" in added and "+    count: 2" in added
    assert '+  value: { string_value: "fp16" }' in added
    assert '-  value: { string_value: "fp32" }' in removed


def _judged(base, cur):
    # direction is what these check: judged as from one job (no job-to-job allowance)
    quiet = GateOptions(job_noise_pct=parse_job_noise(["all:0%"]))
    [(_, results)] = C.judge_groups([base], [("current", [cur])], quiet)
    return [f for r in results for f in r.findings]


def test_comparison_is_direction_aware():
    base = RunRecord.load(RECORDS / "compare" / "baseline.json")
    cur = RunRecord.load(RECORDS / "compare" / "current.json")
    worse = RunRecord.load(RECORDS / "compare" / "current_regressed.json")
    better = _judged(base, cur)
    thr = [f for f in better if f.metric == "throughput"]
    assert len(thr) == len(base.levels)
    assert all(f.verdict == "improvement" and f.delta_pct > 0 for f in thr)
    p99 = [f for f in better if f.metric == "p99"]
    assert all(f.verdict == "improvement" and f.delta_pct < 0 for f in p99)  # lower latency is better
    reg = _judged(base, worse)
    assert any(f.verdict == "regression" and f.metric == "throughput" and f.delta_pct < 0 for f in reg)
    assert any(f.verdict == "regression" and f.metric == "p99" and f.delta_pct > 0 for f in reg)
    b0, c0 = base.levels[0], cur.levels[0]
    f0 = next(f for f in better if f.metric == "throughput" and f.level == b0.load.label)
    assert f0.baseline == b0.throughput_infer_per_s and f0.current == c0.throughput_infer_per_s
    assert f0.delta_pct == pytest.approx((c0.throughput_infer_per_s / b0.throughput_infer_per_s - 1) * 100)
    fig = C.delta_figure("current", C.judge_groups([base], [("current", [cur])])[0][1])
    assert fig is not None and all(v is not None and v > 0 for s in fig.series for v in s.values)  # up is better


def test_comparison_pools_repeats_and_notes_unmatched_levels():
    base = RunRecord.load(RECORDS / "compare" / "baseline.json")
    short = dataclasses.replace(base, levels=base.levels[:3])
    [(_, [result])] = C.judge_groups([base, base], [("current", [short])])
    assert {f.level for f in result.findings} == {lv.load.label for lv in base.levels[:3]}
    assert all(f.verdict == "pass" and f.delta_pct == pytest.approx(0, abs=0.5) for f in result.findings)
    assert any("not in current" in n for n in result.notes)


def test_current_runs_split_by_config_only_where_a_model_has_several():
    base = RunRecord.load(RECORDS / "compare" / "baseline.json")
    cur = RunRecord.load(RECORDS / "compare" / "current.json")
    other_model = dataclasses.replace(
        cur, model=dataclasses.replace(cur.model, name="other", served_config_sha256="ff" * 32)
    )
    assert [label for label, _ in C.group_current([cur, other_model])] == ["current"]
    groups = C.group_current([cur, base])  # one model, two configs: compared apart
    assert [len(recs) for _, recs in groups] == [1, 1]
    assert groups[0][0] == f"current: config {cur.model.served_config_sha256[:8]}"


def test_first_figure_is_one_per_model_when_throughputs_differ_20x():
    from perfkit.gate.synthetic import synthetic_record
    from perfkit.report._profile_page import profile_page

    runs = [
        synthetic_record(model="fast", latency_ms=1.0),
        synthetic_record(model="middle", latency_ms=5.0),
        synthetic_record(model="slow", latency_ms=20.0),
    ]
    figures = F.throughput_latency_per_model(runs)
    assert [f.key for f in figures] == [
        "throughput-latency-fast",
        "throughput-latency-middle",
        "throughput-latency-slow",
    ]
    for fig, rec in zip(figures, runs):
        xs = {x for s in fig.series for x, _ in s.points}
        assert xs == {lv.throughput_infer_per_s for lv in rec.levels}  # each model on its own axes, nothing else
    page = profile_page(runs)
    curve = next(s for s in page.sections if s.id == "curve")
    assert [b.key for b in curve.blocks] == [f.key for f in figures]
    assert F.throughput_latency_per_model(runs[:1])[0].key == "throughput-latency"  # one model: one figure as before

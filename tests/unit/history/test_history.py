"""History and change points over synthetic series and stores (no server).

Detection figures (measured here, on every run of this file, and stated in the README): series
of 60 runs with lognormal run-to-run noise of sd 1.5% (what 14 unchanged runs of the `sleeper`
fixture moved throughput by on a shared 2-core runner, ~1.3%) and one step at run 30.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from perfkit.cli import main
from perfkit.errors import ExitCode
from perfkit.gate.synthetic import synthetic_record
from perfkit.history import ChangeOptions, HistoryFilter, Point, Series, detect, e_divisive, read_store, series_of
from perfkit.report._history import changes_table, history_figure
from perfkit.store import open_store

NOISE_SD = 0.015
RUNS = 60
STEP_AT = 30


def _series(values: np.ndarray, metric: str = "throughput", noise_pct: float = 3.0) -> Series:
    points = tuple(
        Point(f"r{i}", f"2025-01-01T00:{i // 60:02d}:{i % 60:02d}Z", f"c{i}", "m", float(v), v * 0.95, v * 1.05)
        for i, v in enumerate(values)
    )
    return Series("sleeper", "concurrency 1", metric, "infer/s", points, noise_pct)


def _noisy(seed: int, n: int = RUNS, step_pct: float = 0.0, at: int = STEP_AT) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = 100.0 * np.exp(rng.normal(0.0, NOISE_SD, n))
    x[at:] *= 1 + step_pct / 100
    return x


def test_e_divisive_finds_two_known_change_points():
    rng = np.random.default_rng(7)
    x = np.r_[rng.normal(100, 2, 25), rng.normal(85, 2, 20), rng.normal(95, 2, 25)]
    splits = e_divisive(x, alpha=0.01, seed=1)
    assert [s.index for s in splits] == [25, 45]
    assert all(s.p_value <= 0.01 for s in splits)


def test_e_divisive_is_seeded_and_needs_min_size_each_side():
    x = _noisy(3, step_pct=-10)
    assert e_divisive(x, seed=5) == e_divisive(x, seed=5)
    assert e_divisive(np.r_[np.full(2, 100.0), np.full(2, 50.0)], min_size=3) == []


def test_detection_rate_of_a_5pct_step_and_a_10pct_step():
    """A throughput drop of 5% (above the 3% default job noise) in 1.5% noise is found at its run."""
    for step, trials, need in ((-5.0, 30, 0.9), (-10.0, 15, 1.0)):
        found = 0
        for seed in range(trials):
            changes = detect(_series(_noisy(seed, step_pct=step)), ChangeOptions(seed=seed))
            regressions = [c for c in changes if c.direction == "regression" and abs(c.index - STEP_AT) <= 2]
            found += bool(regressions)
            if regressions:
                assert regressions[0].change_pct == pytest.approx(step, abs=2.0)
        assert found / trials >= need, f"{step}% step found in {found}/{trials} series"


def test_false_alarms_per_100_runs_without_a_change():
    alarms = runs = 0
    for seed in range(20):
        values = _noisy(1000 + seed, n=100)
        alarms += len(detect(_series(values), ChangeOptions(seed=seed)))
        runs += len(values)
    assert alarms / runs * 100 <= 1.0, f"{alarms} false alarms in {runs} runs"


def test_a_change_smaller_than_the_job_noise_is_not_reported():
    values = _noisy(11, step_pct=-2.0) * 0 + np.r_[np.full(STEP_AT, 100.0), np.full(RUNS - STEP_AT, 98.0)]
    assert e_divisive(values)  # significant: no noise at all
    assert detect(_series(values)) == []  # but 2% < 3% job noise
    assert len(detect(_series(values), ChangeOptions(min_change_pct=1.0))) == 1


def test_latency_rise_is_a_regression_and_throughput_rise_an_improvement():
    up = np.r_[np.full(10, 10.0), np.full(10, 12.0)] + np.random.default_rng(2).normal(0, 0.05, 20)
    lat = detect(_series(up, metric="p99", noise_pct=5.0))
    tput = detect(_series(up * 10, metric="throughput"))
    assert [c.direction for c in lat] == ["regression"]
    assert [c.direction for c in tput] == ["improvement"]


def _store(path: Path, slowdown_from: int | None, runs: int = 16, model: str = "sleeper") -> Path:
    rng = np.random.default_rng(0)
    with open_store(path) as st:
        for i in range(runs):
            offset = float(np.exp(rng.normal(0, 0.01))) * (
                1.12 if slowdown_from is not None and i >= slowdown_from else 1
            )
            rec = synthetic_record(seed=i, offset=offset, model=model)
            st.save(dataclasses.replace(rec, created_utc=f"2025-02-{i + 1:02d}T00:00:00Z"), commit=f"{i:02d}" * 20)
    return path


def test_series_of_a_store_keep_run_order_and_intervals(tmp_path: Path):
    store = _store(tmp_path / "s.sqlite", slowdown_from=None, runs=6)
    _store(store, slowdown_from=None, runs=3, model="identity")
    with open_store(store) as st:
        series = series_of(read_store(st, HistoryFilter(models=("sleeper",))))
    assert {s.model for s in series} == {"sleeper"}
    assert {(s.level, s.metric) for s in series} == {
        (lv, m) for lv in ("concurrency 1", "concurrency 4") for m in ("throughput", "p50", "p99")
    }
    for s in series:
        assert [p.created_utc for p in s.points] == sorted(p.created_utc for p in s.points)
        assert all(p.low < p.value < p.high for p in s.points)


def test_history_cli_fails_on_a_recent_regression_and_writes_page_and_json(tmp_path: Path, capsys):
    (tmp_path / "s").mkdir()
    store = _store(tmp_path / "s", slowdown_from=9)  # a directory store
    html, out_json = tmp_path / "reports" / "history.html", tmp_path / "h.json"
    rc = main(["history", "--store", str(store), "--fail-on-change", "--html", str(html), "--json", str(out_json)])
    out = capsys.readouterr()
    assert rc == ExitCode.HISTORY_CHANGE, out
    assert "REGRESSION: sleeper concurrency 1 throughput" in out.out
    assert "from run " in out.out and "commit 0909090909" in out.out  # the first slow run (index 9) and its commit
    page = html.read_text()
    assert "Change points" in page and "<svg" in page
    data = json.loads(out_json.read_text())
    assert {c["index"] for c in data["changes"]} == {9}

    # without --fail-on-change it reports and passes; a regression older than --recent does not fail
    assert main(["history", "--store", str(store)]) == ExitCode.OK
    assert main(["history", "--store", str(store), "--fail-on-change", "--recent", "3"]) == ExitCode.OK


def test_history_cli_passes_a_steady_store_and_refuses_an_unknown_model(tmp_path: Path, capsys):
    store = _store(tmp_path / "s.sqlite", slowdown_from=None)
    assert main(["history", "--store", str(store), "--fail-on-change"]) == ExitCode.OK
    assert main(["history", "--store", str(store), "--model", "nope"]) == ExitCode.USAGE
    assert "no runs in store" in capsys.readouterr().err


def test_history_figure_data_marks_each_change():
    values = np.r_[np.full(8, 100.0), np.full(8, 80.0)]
    series = _series(values)
    changes = detect(series)
    fig = history_figure(series, changes)
    assert [p[1] for p in fig.series[0].points] == list(values)
    assert fig.vlines == ((8.5, "regression -20.0%"),)
    table = changes_table(changes)
    assert table.rows[0][3:5] == ("regression", 9)


def test_history_filters_by_branch_and_sweep(tmp_path: Path):
    store = tmp_path / "s.sqlite"
    with open_store(store) as st:
        for i in range(4):
            rec = synthetic_record(seed=i)
            if i % 2:
                rec = dataclasses.replace(rec, command=("perfkit", "run", "sweeps/nightly.toml"))
            st.save(
                dataclasses.replace(rec, created_utc=f"2025-03-0{i + 1}T00:00:00Z"), branch="main" if i < 2 else "dev"
            )
    with open_store(store) as st:
        assert {e.branch for e in st.list()} == {"main", "dev"}
        main_runs = read_store(st, HistoryFilter(branch="main"))
        nightly = read_store(st, HistoryFilter(sweep="nightly"))
        by_path = read_store(st, HistoryFilter(sweep="sweeps/nightly.toml"))
    assert [r.created_utc for _, r in main_runs] == ["2025-03-02T00:00:00Z", "2025-03-01T00:00:00Z"]
    assert {r.created_utc for _, r in nightly} == {"2025-03-02T00:00:00Z", "2025-03-04T00:00:00Z"}
    assert {e.id for e, _ in by_path} == {e.id for e, _ in nightly}


def test_a_store_written_before_branches_were_kept_opens_and_reads_empty_branches(tmp_path: Path):
    import sqlite3

    path = tmp_path / "old.sqlite"
    with open_store(path) as st:
        st.save(synthetic_record(), commit="abc", branch="x")
    db = sqlite3.connect(path)  # make it the older layout: no branch column
    db.executescript(
        "CREATE TABLE r2 AS SELECT id, model, config_sha256, server_version, machine, commit_sha, created_utc,"
        " saved_utc, record FROM runs; DROP TABLE runs; ALTER TABLE r2 RENAME TO runs;"
    )
    db.close()
    with open_store(path) as st:
        (entry,) = st.list()
        assert entry.branch == "" and entry.commit == "abc"
        st.save(synthetic_record(seed=9), branch="main")
        assert sorted(e.branch for e in st.list()) == ["", "main"]


def test_perfkit_report_history_writes_the_page_of_a_store(tmp_path: Path, capsys):
    store = _store(tmp_path / "s.sqlite", slowdown_from=9)
    out = tmp_path / "h.html"
    assert main(["report", "--history", str(store), "-o", str(out)]) == ExitCode.OK
    page = out.read_text()
    assert "performance history" in page and "regression" in page
    assert main(["report", "--history", str(store), str(out)]) == ExitCode.USAGE
    assert main(["report"]) == ExitCode.USAGE

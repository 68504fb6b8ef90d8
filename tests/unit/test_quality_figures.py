"""The figures of the predict-quality benchmark (benchmarks/_quality_figures.py), without a server:
the sustainable-rate search over levels, prediction errors, the pick and claim ratios, the goals
and the table."""

from __future__ import annotations

import math

import pytest

from benchmarks._quality_figures import goals_met, held, markdown, prediction_errors, search_figures, sustainable


def _server(limit_rps: float, completes: float = 1.0) -> tuple[list[float], object]:
    """A fake perf_analyzer: p99 10 ms up to limit_rps, 500 ms above; completes a share of the rate."""
    asked: list[float] = []

    def measure(rate: float) -> tuple[float, float]:
        asked.append(rate)
        return rate * completes, 10.0 if rate <= limit_rps else 500.0

    return asked, measure


@pytest.mark.parametrize("start", [20.0, 450.0, 5000.0])
def test_the_rate_search_finds_the_highest_held_rate_to_5_percent_from_any_start(start: float) -> None:
    asked, measure = _server(450.0)
    best, levels = sustainable(measure, start, budget_ms=50.0)  # type: ignore[arg-type]  # a fake measure
    assert 450.0 / 1.05 <= best <= 450.0
    assert [lv.rate_rps for lv in levels] == asked
    assert any(lv.held for lv in levels) and any(not lv.held and lv.rate_rps > best for lv in levels)
    assert len(levels) <= 14  # 8 gallop steps at most here, then 3 bisections


def test_the_rate_search_gallops_far_enough_to_find_a_rate_600_times_its_start() -> None:
    _, measure = _server(60_000.0)  # 8 steps of 1.5x from 100 stopped at 2,563
    best, _ = sustainable(measure, 100.0, budget_ms=50.0)  # type: ignore[arg-type]  # a fake measure
    assert 60_000.0 / 1.05 <= best <= 60_000.0


def test_rates_below_the_floor_are_not_measured() -> None:
    asked, measure = _server(2.0)
    best, _ = sustainable(measure, 100.0, budget_ms=50.0, min_rps=5.0)  # type: ignore[arg-type]  # a fake measure
    assert best == 0.0 and min(asked) >= 5.0


def test_a_level_that_completes_too_little_of_the_rate_does_not_hold() -> None:
    assert held(100.0, 90.0, 10.0, 50.0)
    assert not held(100.0, 89.0, 10.0, 50.0)
    assert not held(100.0, 100.0, 50.1, 50.0)
    _, measure = _server(1e9, completes=0.85)
    best, levels = sustainable(measure, 100.0, budget_ms=50.0)  # type: ignore[arg-type]  # a fake measure
    assert best == 0.0 and not any(lv.held for lv in levels)


def test_prediction_errors_median_and_worst_with_its_sign() -> None:
    e = prediction_errors({"a": 110.0, "b": 80.0, "c": 50.0}, {"a": 100.0, "b": 100.0, "c": 0.0, "d": 10.0})
    assert e["per_config"]["a"] == pytest.approx(0.10)
    assert e["per_config"]["b"] == pytest.approx(-0.20)
    assert e["per_config"]["c"] is None and "d" not in e["per_config"]
    assert e["median_abs"] == pytest.approx(0.15)
    assert e["worst"] == pytest.approx(-0.20) and e["worst_config"] == "b" and e["n"] == 2
    assert prediction_errors({}, {"a": 1.0})["median_abs"] is None


GRID = {"x": 1000.0, "y": 960.0, "z": 500.0}


def test_a_pick_within_5_percent_of_the_grid_best_with_a_claim_within_10_percent_meets_the_goals() -> None:
    f = search_figures({"pick": "y", "claim_rps": 1000.0, "remeasured_rps": 950.0, "trials": 4, "wall_s": 100.0},
                       GRID, "model")  # fmt: skip
    assert f["pick_vs_grid_best"] == pytest.approx(0.96)
    assert f["pick_remeasured_vs_grid_best"] == pytest.approx(0.95)
    assert f["claim_vs_remeasured"] == pytest.approx(1000 / 950)
    assert f["goals"] == {"pick": True, "claim": True, "wall": True}


def test_each_goal_is_missed_on_its_own() -> None:
    base = {"pick": "y", "claim_rps": 1000.0, "remeasured_rps": 950.0, "trials": 4, "wall_s": 100.0}
    assert search_figures({**base, "pick": "z"}, GRID, "model")["goals"]["pick"] is False
    assert search_figures({**base, "claim_rps": 1100.0}, GRID, "model")["goals"]["claim"] is False
    assert search_figures({**base, "remeasured_rps": 0.0}, GRID, "model")["goals"]["claim"] is False
    assert search_figures({**base, "wall_s": 200.0}, GRID, "model")["goals"]["wall"] is False
    assert search_figures({**base, "wall_s": 200.0}, GRID, "pipeline")["goals"]["wall"] is True
    assert search_figures({**base, "pick": None}, GRID, "model")["goals"]["pick"] is False
    assert goals_met(search_figures(base, GRID, "model"))
    assert not goals_met(search_figures({**base, "wall_s": 200.0}, GRID, "model"))
    assert not goals_met(search_figures({"refused": "--max-time 120 s ran out"}, GRID, "model"))  # meets none


def test_the_pick_is_judged_side_by_side_with_the_grid_best_where_both_were_re_measured_so() -> None:
    base = {"pick": "y", "claim_rps": 1000.0, "remeasured_rps": 950.0, "trials": 4, "wall_s": 100.0}
    # y read 0.82x the best in the grid's pass; side by side it reads 0.97x: the pick's goal holds
    grid = {"x": 1000.0, "y": 820.0}
    f = search_figures(base, grid, "model", {"x": 900.0, "y": 873.0})
    assert f["pick_vs_grid_best"] == pytest.approx(0.82) and f["pick_vs_grid_best_side_by_side"] == pytest.approx(0.97)
    assert f["goals"]["pick"] is True
    # ... and the other way round: side by side decides
    assert search_figures(base, GRID, "model", {"x": 1000.0, "y": 800.0})["goals"]["pick"] is False
    # without a side-by-side reading of both (or when the pick is the grid's best), the grid's pass decides
    assert search_figures(base, grid, "model", {"x": 900.0})["goals"]["pick"] is False
    assert search_figures({**base, "pick": "x"}, grid, "model", {"x": 900.0})["goals"]["pick"] is True
    row = [ln for ln in markdown([{"subject": "m", "searches": {"predict": base}, "grid": grid,
                                   "figures": {"predict": f}}]).splitlines() if ln.startswith("| m |")]  # fmt: skip
    assert "0.82; 0.95; side by side 0.97 |" in row[0]


def test_the_table_shows_each_search_a_refusal_and_the_grid_with_predictions() -> None:
    searches = {
        "predict": {"pick": "y", "claim_rps": 1200.0, "remeasured_rps": 950.0, "trials": 3, "wall_s": 90.0},
        "measure": {"pick": "x", "claim_rps": 1000.0, "remeasured_rps": 990.0, "trials": 9, "wall_s": 480.0},
    }
    one = {
        "subject": "m",
        "budget_ms": 100.0,
        "searches": searches,
        "figures": {k: search_figures(v, GRID, "model") for k, v in searches.items()},
        "grid": GRID,
        "predicted": {"x": 900.0, "y": 1000.0},
        "errors": prediction_errors({"x": 900.0, "y": 1000.0}, GRID),
    }
    refused = {"subject": "p", "searches": {"predict": {"refused": "--search predict tunes one model\nmore"}},
               "figures": {"predict": search_figures({"refused": "--search predict tunes one model"}, {}, "pipeline")},
               "grid": {}}  # fmt: skip
    text = markdown([one, refused])
    rows = [line for line in text.splitlines() if line.startswith("| m |")]
    assert len(rows) == 2
    assert "1.26 ✗" in rows[0] and "480 ✗" in rows[1]  # claim 1200/950 off; 480 s over 2 minutes
    assert "7%, -10%" in rows[0]  # errors x -10%, y +4%: median of their sizes 7%, worst -10%
    assert "| p | `--search predict` | refused: --search predict tunes one model |" in text
    assert "| z | 500 | – | – |" in text and "| x | 1000 | 900 | -10% |" in text
    assert not math.isnan(one["errors"]["median_abs"])
    nothing = {**one, "searches": {"predict": {"pick": None, "trials": 2, "wall_s": 1020.0}}}
    nothing["figures"] = {"predict": search_figures(nothing["searches"]["predict"], GRID, "model")}
    rows = [line for line in markdown([nothing]).splitlines() if line.startswith("| m |")]
    assert len(rows) == 1  # the measured search was not run: no row for it
    assert "none held the budget | –; – ✗" in rows[0] and "1020 ✗" in rows[0]


def test_a_level_held_once_by_luck_is_rechecked_and_the_search_goes_on_below_it() -> None:
    # A server that holds up to 450 req/s, and once (its first try) at 700: without rechecks that
    # one window is the figure; with them 700 fails again and the search finds 450 below it.
    tries: dict[float, int] = {}
    asked: list[float] = []

    def measure(rate: float) -> tuple[float, float]:
        asked.append(rate)
        tries[rate] = tries.get(rate, 0) + 1
        lucky = 690.0 <= rate <= 710.0 and tries[rate] == 1
        return rate, 10.0 if rate <= 450.0 or lucky else 500.0

    once, _ = sustainable(measure, 700.0, budget_ms=50.0)
    assert once == 700.0
    tries.clear()
    asked.clear()
    best, levels = sustainable(measure, 700.0, budget_ms=50.0, rechecks=2)
    assert 450.0 / 1.05 <= best <= 450.0
    assert asked.count(700.0) == 2 and [lv.held for lv in levels if lv.rate_rps == 700.0] == [True, False]
    # the level kept was measured twice and held both times (the last recheck is not needed past the limit)
    top = max(lv.rate_rps for lv in levels if lv.held and lv.rate_rps != 700.0)
    assert asked.count(top) == 2 and all(lv.held for lv in levels if lv.rate_rps == top)
    # A server that holds everywhere it holds: each recheck holds, one extra level.
    asked2, steady = _server(450.0)
    best2, levels2 = sustainable(steady, 100.0, budget_ms=50.0, rechecks=2)
    assert 450.0 / 1.05 <= best2 <= 450.0 and len(asked2) == len(set(asked2)) + 1

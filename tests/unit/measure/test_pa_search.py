"""perf_analyzer's --binary-search order (measure/_pa_search.py), by hand from src/inference_profiler.h's
Profile (SearchMode::BINARY): start, end, then bisection; and its meets_threshold on a level."""

from __future__ import annotations

import dataclasses

import numpy as np

from perfkit.measure import _loop
from perfkit.measure._pa_search import meets_threshold
from perfkit.recorder import summarize
from perfkit.records import LevelResult, LoadLevel, Precision, ProfileSpec


def _level(load: LoadLevel, mean_us: float, stable: bool = True) -> LevelResult:
    lat = summarize("service", np.full(50, mean_us))
    return LevelResult(
        load, 1, stable, Precision(0.01, 0.01), 1.0, 5, 5, 5.0, 5.0, 5.0, 0, {}, 0, 0, None, lat, None, ()
    )


def _search(values: list[float], mode: str, edge: float, **kw: object) -> list[float]:
    """The values measured when every level up to `edge` meets a 10 ms threshold (5 ms at or under it, 20 ms above)."""
    levels = tuple(LoadLevel(mode, v, "constant" if mode == "request_rate" else None) for v in values)  # type: ignore[arg-type]  # test modes
    kw = {"stop_rule": "stability", **kw}
    spec = ProfileSpec(model="m", levels=levels, binary_search=True, latency_threshold_ms=10.0, **kw)  # type: ignore[arg-type]  # test kwargs
    seen: list[float] = []

    def run(level: LoadLevel) -> LevelResult:
        seen.append(level.value)
        return _level(level, 5_000.0 if level.value <= edge else 20_000.0)

    _loop.walk_levels(spec, run)
    return seen


def test_the_start_over_the_threshold_is_the_only_level_measured():
    assert _search([1000.0 + 100 * i for i in range(11)], "request_rate", edge=500.0) == [1000.0]


def test_the_end_within_it_ends_the_search_there():
    assert _search([1.0, 3.0, 5.0, 7.0], "concurrency", edge=9.0) == [1.0, 7.0]


def test_between_them_the_values_are_bisected_until_within_a_step():
    # 1000..2000 by 100, edge 1400: 1000 ok, 2000 over, 1500 over, 1250 ok, 1375 ok, 1437.5 over (62.5 <= 100)
    rates = [1000.0 + 100 * i for i in range(11)]
    assert _search(rates, "request_rate", edge=1400.0) == [1000.0, 2000.0, 1500.0, 1250.0, 1375.0, 1437.5]
    # concurrency 1..8 by 1, edge 5: 1, 8, (8+1)//2 = 4 ok, 6 over, 5 ok (6 - 5 = 1, not > 1)
    assert _search([float(c) for c in range(1, 9)], "concurrency", edge=5.0) == [1.0, 8.0, 4.0, 6.0, 5.0]


def test_perfkits_own_rule_keeps_its_own_search():
    rates = [1000.0 + 100 * i for i in range(11)]
    assert _search(rates, "request_rate", edge=500.0, stop_rule="precision")[0] == 1500.0  # the middle first


def test_a_level_meets_the_threshold_when_stable_and_under_it():
    spec = ProfileSpec(model="m", levels=(LoadLevel("concurrency", 1),), latency_threshold_ms=10.0)
    ok = _level(LoadLevel("concurrency", 1), 9_999.0)
    assert meets_threshold(spec, ok)
    assert not meets_threshold(spec, dataclasses.replace(ok, stable=False))  # unstable fails it, as in Profile
    assert not meets_threshold(spec, _level(LoadLevel("concurrency", 1), 10_000.0))  # at it fails (>=)
    assert meets_threshold(dataclasses.replace(spec, latency_threshold_ms=None), ok)


def _record(spec: ProfileSpec, *levels: LevelResult):
    from perfkit.records import Machine, ModelInfo, RunRecord, ServerInfo

    return RunRecord("0", "t", (), Machine(), ServerInfo(), ModelInfo(name="m"), spec, levels)


def test_perf_analyzers_exit_code_2_only_for_a_sweeps_first_level_unstable(monkeypatch, capsys):
    from perfkit.cli._pa_compat import EXIT_CODES_ENV, PA_STABILITY_ERROR_MARK, unstable_exit

    monkeypatch.setenv(EXIT_CODES_ENV, "perf_analyzer")
    c1, c2 = LoadLevel("concurrency", 1), LoadLevel("concurrency", 2)
    spec = ProfileSpec(model="m", levels=(c1, c2), stop_rule="stability", latency_threshold_ms=10.0)
    assert unstable_exit(_record(spec, _level(c1, 5_000.0), _level(c2, 5_000.0))) == 0
    assert unstable_exit(_record(spec, _level(c1, 5_000.0, stable=False))) == PA_STABILITY_ERROR_MARK
    assert "Failed to obtain stable measurement within" in capsys.readouterr().err
    assert unstable_exit(_record(spec, _level(c1, 5_000.0), _level(c2, 20_000.0, stable=False))) == 0
    assert "Measured latency went over the set limit of 10 msec." in capsys.readouterr().err
    search = dataclasses.replace(spec, binary_search=True)
    assert unstable_exit(_record(search, _level(c1, 20_000.0, stable=False))) == 0
    # perfkit's own rule under perf_analyzer's codes: any unstable level, as before
    own = dataclasses.replace(spec, stop_rule="precision")
    assert (
        unstable_exit(_record(own, _level(c1, 5_000.0), _level(c2, 5_000.0, stable=False))) == PA_STABILITY_ERROR_MARK
    )

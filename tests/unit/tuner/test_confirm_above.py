"""A claim held where its trial's search stopped at a rate it only held (a lower bound: the predicted
search ends a trial of a config the request path bounds at the path's calibrated capacity) is
confirmed a rate-ladder step above when its percentile's bound is well within the budget
(confirm_above): onnx_mlp, the server on one CPU, held 9,110 req/s with a bound of 8.9 ms against
20 ms, and perf_analyzer then held 10,009. A stand-in runner (open loop, p99 <= 20 ms) whose runs
read p99 by rate; the confirmations stored in a real optuna study."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import optuna
import pytest

from perfkit.budget import Budget
from perfkit.gate.synthetic import synthetic_level, synthetic_record
from perfkit.records import M_LOWER_BOUND, LoadLevel, Precision
from perfkit.tuner._confirm import ConfirmSettings, confirm_picks, confirmations
from perfkit.tuner._load_search import JudgeSettings, rate_ladder

BUDGET = Budget(20.0, 99.0, "latency")
SEARCHED_RPS = 9110.0
ABOVE_RPS = min(v for v in rate_ladder(SEARCHED_RPS, 20_000.0) if v > SEARCHED_RPS * 1.005)
CS = ConfirmSettings(repeats=3, min_windows=1, max_windows=1)


def _runner(tmp_path: Path, p99_ms: Callable[[float], float]) -> tuple[SimpleNamespace, list[float], list[Any]]:
    measured: list[float] = []
    events: list[Any] = []

    def measure(server: Any, spec: Any, *, command: Any = (), record_path: Any = None) -> Any:
        rate = spec.levels[0].value
        measured.append(rate)
        lv = synthetic_level(concurrency=rate, latency_ms=p99_ms(rate) / 1.3, noise=0.0, open_loop=True)
        lv = dataclasses.replace(lv, load=LoadLevel("request_rate", rate, "poisson"), sent_rps=rate, completed_rps=rate,
                                 duration_s=5.6, precision=Precision(0.02, 0.01))  # fmt: skip
        return synthetic_record([lv], model=spec.model)

    judge = JudgeSettings(budget=BUDGET, load_mode="rate", max_rate_rps=20_000.0)
    s = SimpleNamespace(command=(), budget=BUDGET, max_time_s=None)
    t = SimpleNamespace(measure=measure, judge=judge, model="m", out_dir=tmp_path, s=s, server=None,
                        put_candidate=lambda text: None, emit=events.append)  # fmt: skip
    return t, measured, events


def _study(lower_bound: bool) -> optuna.Study:
    """One trial of the predicted search: held SEARCHED_RPS (its only level), a lower bound or not."""
    study = optuna.create_study(direction="maximize")
    trial = study.ask()
    attrs = {"feasible": True, "throughput_infer_per_s": SEARCHED_RPS, "latency_us": 3_000.0, "params": {"x": 1},
             "config_pbtxt": "", "load": {"mode": "request_rate", "value": SEARCHED_RPS, "distribution": "poisson"},
             "metrics": {M_LOWER_BOUND: 1.0} if lower_bound else {}}  # fmt: skip
    for k, v in attrs.items():
        trial.set_user_attr(k, v)
    study.tell(trial, SEARCHED_RPS)
    return study


@pytest.mark.parametrize("above_p99_ms", [8.0, 30.0])
def test_a_claim_held_at_its_searchs_lower_bound_is_tried_a_step_above(tmp_path: Path, above_p99_ms: float):
    t, measured, events = _runner(tmp_path, lambda rate: 7.0 if rate <= SEARCHED_RPS else above_p99_ms)
    study = _study(lower_bound=True)
    confirm_picks(t, study, CS)  # type: ignore[arg-type]  # a stand-in with the runner's fields
    conf = confirmations(study)[0]
    lines = [e.line() for e in events]
    assert any("a step above the rate it held" in line and f"{ABOVE_RPS:g}" in line for line in lines), lines
    if above_p99_ms < 20:  # held there too: the higher claim
        assert measured == [SEARCHED_RPS] * 3 + [ABOVE_RPS] * 3
        assert conf.held and conf.load.value == ABOVE_RPS and conf.searched_load is None
    else:  # over the budget a step above: one run rules it out, the claim stays where it held
        assert measured == [SEARCHED_RPS] * 3 + [ABOVE_RPS]
        assert conf.held and conf.load.value == SEARCHED_RPS and "not held a step above" in conf.note


@pytest.mark.parametrize(("lower_bound", "p99_ms"), [(False, 7.0), (True, 12.0)])
def test_no_step_above_for_a_searched_figure_or_a_bound_near_the_budget(tmp_path: Path, lower_bound: bool,
                                                                        p99_ms: float):  # fmt: skip
    # the search measured past its figure (not a lower bound), or the bound is over half the budget
    t, measured, _ = _runner(tmp_path, lambda rate: p99_ms)
    study = _study(lower_bound=lower_bound)
    confirm_picks(t, study, CS)  # type: ignore[arg-type]  # as above
    conf = confirmations(study)[0]
    assert measured == [SEARCHED_RPS] * 3 and conf.held and conf.load.value == SEARCHED_RPS

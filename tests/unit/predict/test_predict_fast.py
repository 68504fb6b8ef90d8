"""The simulator's fast paths against its reference: the compiled event loop (_simloop.py, numba)
gives the batches of the rules-as-read loop, batch for batch, to the last bit; a rate search
started at a guess finds the bisection's answer where holding the budget is monotone in the
rate; configs the simulator cannot tell apart are simulated once. No server."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from perfkit.errors import UsageError
from perfkit.predict import (
    BatcherConfig,
    Contention,
    Load,
    ServiceModel,
    _sim,
    score_space,
    simulate,
    sustainable_rate,
    unit_arrivals,
)
from perfkit.predict._rate import behaviour
from perfkit.predict._sim import departures
from tests.conftest import require

SVC = ServiceModel(2_000, 300, overhead_us=200)
CONFIGS = [
    BatcherConfig(),  # no batching, one instance
    BatcherConfig(8, False, (), 0.0, 3),  # no batching, three instances
    BatcherConfig(8, True, (), 0.0, 1),
    BatcherConfig(8, True, (), 3_000.0, 2),
    BatcherConfig(16, True, (2, 4, 8), 1_000.0, 1),  # preferred sizes under max_batch_size
    BatcherConfig(16, True, (4, 16), 0.0, 4),
    BatcherConfig(32, True, (), 20_000.0, 3),
]
CONTENTIONS = [Contention(0.0), Contention(0.5), Contention(1.0)]


def _require_numba() -> None:
    """numba is a dependency of perfkit: missing, these tests skip here and fail under CI=true."""
    require("numba (the simulator's compiled loop)", importlib.util.find_spec("numba"), "pip install -e . installs it")


def _arrivals() -> list[tuple[str, np.ndarray]]:
    poisson = unit_arrivals("poisson", 3_000, seed=5)
    burst = np.repeat(np.arange(40) * 0.02, 25)  # 25 requests at once every 20 ms
    return [("poisson light", poisson / 300), ("poisson heavy", poisson / 2_500),
            ("constant", unit_arrivals("constant", 3_000) / 900), ("burst", burst)]  # fmt: skip


@pytest.mark.parametrize("cfg", CONFIGS, ids=str)
def test_the_compiled_loop_forms_the_reference_loops_batches(cfg: BatcherConfig):
    _require_numba()
    for contention in CONTENTIONS:
        for name, due in _arrivals():
            ref = _sim._run_open_reference(due.tolist(), cfg, SVC, contention)
            assert ref is not None
            fast = _sim._run_open(due, cfg, SVC, contention)
            assert fast is not None
            assert fast[0].tolist() == ref[0], (name, contention)
            assert fast[1].tolist() == ref[1], (name, contention)  # the same operations: the same doubles


@pytest.mark.parametrize("cfg", CONFIGS[:4], ids=str)
def test_the_compiled_loop_gives_up_where_the_reference_does(cfg: BatcherConfig):
    # give_up = (bound, first counted, allowed over): each loop stops at the same batch or runs to the end.
    _require_numba()
    due = unit_arrivals("poisson", 3_000, seed=6) / 1_500
    for bound in (0.003, 0.01, 0.05, 1.0):
        give_up = (bound, 300, 27)
        ref = _sim._run_open_reference(due.tolist(), cfg, SVC, Contention(0.5), give_up)
        fast = _sim._run_open(due, cfg, SVC, Contention(0.5), give_up)
        assert (ref is None) == (fast is None), bound
        if ref is not None and fast is not None:
            assert fast[0].tolist() == ref[0]
            assert fast[1].tolist() == ref[1]
    # A bound no request can meet gives up; one every request meets does not.
    assert _sim._run_open(due, cfg, SVC, Contention(0.5), (1e-6, 0, 0)) is None
    assert _sim._run_open(due, cfg, SVC, Contention(0.5), (1e6, 0, 0)) is not None


@pytest.mark.parametrize("cfg", CONFIGS, ids=str)
def test_departures_are_the_reference_loops_batches_request_by_request(cfg: BatcherConfig):
    # Arrivals given out of order (the burst's ties included): each request gets the end and size
    # of the reference loop's batch that holds it, requests arriving together in the order given.
    _require_numba()
    shuffle = np.random.default_rng(11).permutation
    for contention in CONTENTIONS:
        for name, due in _arrivals():
            ref = _sim._run_open_reference(due.tolist(), cfg, SVC, contention)
            assert ref is not None
            given = due[shuffle(len(due))]
            answer, size = departures(cfg, SVC, given, contention)
            assert answer.shape == size.shape == given.shape and size.dtype == np.int64
            served = np.lexsort((np.arange(len(given)), given))  # by arrival, ties in the order given
            assert answer[served].tolist() == np.repeat(ref[1], ref[0]).tolist(), (name, contention)
            assert size[served].tolist() == np.repeat(ref[0], ref[0]).tolist(), (name, contention)
            assert np.all(answer > given)


def test_departures_of_no_request_and_of_one():
    _require_numba()
    answer, size = departures(CONFIGS[3], SVC, np.empty(0), Contention(0.5))
    assert answer.shape == size.shape == (0,)
    answer, size = departures(CONFIGS[3], SVC, np.array([2.5]), Contention(0.0))
    # Alone it waits out the queue delay (3 ms), then runs as a batch of one.
    assert size.tolist() == [1] and answer[0] == pytest.approx(2.5 + 0.003 + SVC.service_us(1) / 1e6)


def test_every_loop_predicts_the_same():
    _require_numba()
    load = Load("poisson", rate_rps=1_200)
    for cfg in CONFIGS:
        got = {loop: simulate(cfg, SVC, load, Contention(0.5), requests=4_000, loop=loop)
               for loop in ("compiled", "reference")}  # fmt: skip
        assert got["compiled"] == got["reference"], cfg
    with pytest.raises(UsageError, match="loop"):
        simulate(CONFIGS[0], SVC, load, loop="vectorised")


# Configs whose p99 rises steadily with the rate (no queue delay to sit at, no preferred size to
# cut a batch at, one instance or small batches): holding the budget is monotone in the rate, so
# every search finds one answer. (Two instances at max_batch_size 32 are not: near saturation
# their batches grow with the rate and the p99 wobbles by a few percent.)
MONOTONE = [BatcherConfig(), BatcherConfig(instances=3), BatcherConfig(8, True, (), 0.0, 1),
            BatcherConfig(32, True, (), 0.0, 1), BatcherConfig(4, True, (), 0.0, 2)]  # fmt: skip


@pytest.mark.parametrize("cfg", MONOTONE, ids=str)
def test_a_search_started_at_a_guess_finds_the_bisections_rate(cfg: BatcherConfig):
    unit = unit_arrivals("poisson", 4_000, seed=7)
    plain = sustainable_rate(cfg, SVC, 20_000.0, contention=Contention(0.5), unit=unit)
    assert plain.rate_rps > 0
    for factor in (0.01, 0.3, 0.97, 1.0, 1.05, 3.0):  # far below, near, far above (past the bound: ignored)
        guessed = sustainable_rate(cfg, SVC, 20_000.0, contention=Contention(0.5), unit=unit,
                                   guess_rps=plain.rate_rps * factor)  # fmt: skip
        assert guessed == plain, factor
    # The reference loop's search agrees too (the same batches, so the same answer).
    assert sustainable_rate(cfg, SVC, 20_000.0, contention=Contention(0.5), unit=unit, loop="reference") == plain


def test_warm_started_scoring_ranks_as_the_plain_one():
    space = MONOTONE + [BatcherConfig(b, True, (), 0.0, 1) for b in (2, 4, 16)]
    space += [BatcherConfig(b, False, (), 0.0, c) for b in (1, 8) for c in (1, 2)]
    warm = score_space(space, SVC, 20_000.0, contention=Contention(0.5), requests=3_000)
    plain = score_space(space, SVC, 20_000.0, contention=Contention(0.5), requests=3_000, warm_start=False,
                        loop="reference")  # fmt: skip
    assert [(r.config, r.rate_rps) for r in warm] == [(r.config, r.rate_rps) for r in plain]


def test_configs_the_simulator_cannot_tell_apart_are_simulated_once(monkeypatch: pytest.MonkeyPatch):
    # No dynamic batching at any max_batch_size, and max_batch_size 1 with it on, are one behaviour;
    # preferred sizes of none and [max_batch_size] are one.
    alike = [BatcherConfig(0, False), BatcherConfig(8, False), BatcherConfig(1, True, (), 5_000.0)]
    assert len({behaviour(c) for c in alike}) == 1
    assert behaviour(BatcherConfig(8, True, (), 100.0)) == behaviour(BatcherConfig(8, True, (8,), 100.0))
    assert behaviour(BatcherConfig(8, True, (), 100.0)) != behaviour(BatcherConfig(8, True, (), 200.0))
    calls: list[BatcherConfig] = []
    real = sustainable_rate

    def counted(cfg: BatcherConfig, *args: object, **kwargs: object):
        calls.append(cfg)
        return real(cfg, *args, **kwargs)  # type: ignore[arg-type]  # passed through as given

    monkeypatch.setattr("perfkit.predict._rate.sustainable_rate", counted)
    out = score_space(alike + [BatcherConfig(8, True, (), 100.0), BatcherConfig(8, True, (8,), 100.0)], SVC, 20_000.0,
                      requests=2_000)  # fmt: skip
    assert len(calls) == 2
    by = {r.config: r.rate_rps for r in out}
    assert len({by[c] for c in alike}) == 1 and {r.config for r in out} == set(alike) | {
        BatcherConfig(8, True, (), 100.0), BatcherConfig(8, True, (8,), 100.0)}  # fmt: skip

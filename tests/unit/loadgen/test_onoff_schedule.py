"""On/off arrivals: the due times of bursts, their mean rate, and the flags that ask for them."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from perfkit.cli._profile_options import build_levels
from perfkit.errors import UsageError
from perfkit.records import LoadLevel
from perfkit.schedule import due_times, onoff_due_ns

MS = 1_000_000


def _first(it, n: int) -> list[int]:
    return list(itertools.islice(it, n))


def test_bursts_send_evenly_while_on_and_nothing_while_off() -> None:
    # 100 req/s mean, 50 ms on / 150 ms off: 20 requests a 200 ms cycle, 2.5 ms apart while on.
    due = np.array(_first(onoff_due_ns(100.0, 50.0, 150.0), 60))
    cycle, offset = np.divmod(due, 200 * MS)
    assert (offset < 50 * MS).all()  # nothing is due in an off window
    assert np.bincount(cycle).tolist() == [20, 20, 20]  # each burst holds the cycle's share
    gaps_in_burst = np.diff(due[:20])
    assert np.allclose(gaps_in_burst, 2.5 * MS, atol=1)
    assert due[20] - due[19] == pytest.approx(2.5 * MS + 150 * MS, abs=1)  # the quiet gap, then the next burst


def test_the_mean_rate_over_whole_cycles_is_the_levels_rate() -> None:
    due = _first(onoff_due_ns(333.0, 10.0, 30.0), 333 * 10)
    span_s = due[-1] / 1e9
    assert len(due) / span_s == pytest.approx(333.0, rel=0.02)


def test_workers_interleave_to_the_same_schedule() -> None:
    one = _first(onoff_due_ns(200.0, 20.0, 80.0), 90)
    shares = [_first(onoff_due_ns(200.0, 20.0, 80.0, worker=w, workers=3), 30) for w in range(3)]
    assert sorted(itertools.chain(*shares)) == one


def test_no_off_window_is_a_constant_rate() -> None:
    assert _first(onoff_due_ns(50.0, 100.0, 0.0), 10) == [i * 20 * MS for i in range(10)]


def test_a_level_with_onoff_draws_its_due_times_from_its_windows() -> None:
    level = LoadLevel("request_rate", 100.0, "onoff", 50.0, 150.0)
    assert _first(due_times(level), 25) == _first(onoff_due_ns(100.0, 50.0, 150.0), 25)
    assert "onoff (50 ms on, 150 ms off)" in level.label
    default = LoadLevel("request_rate", 100.0, "onoff")
    assert default.bursts_ms == (62.5, 187.5)


@pytest.mark.parametrize(("on_ms", "off_ms"), [(0.0, 10.0), (-1.0, 10.0), (10.0, -1.0)])
def test_windows_that_cannot_be_are_refused(on_ms: float, off_ms: float) -> None:
    with pytest.raises(ValueError):
        next(onoff_due_ns(100.0, on_ms, off_ms))
    with pytest.raises(UsageError, match="--burst-o"):
        build_levels(None, "100", "onoff", None, burst_on_ms=on_ms, burst_off_ms=off_ms)


def test_the_flags_build_onoff_levels_and_refuse_bursts_without_them() -> None:
    levels = build_levels(None, "100:200:100", "onoff", None, burst_on_ms=20.0, burst_off_ms=80.0)
    assert [(lv.value, lv.distribution, lv.bursts_ms) for lv in levels] == [
        (100.0, "onoff", (20.0, 80.0)),
        (200.0, "onoff", (20.0, 80.0)),
    ]
    with pytest.raises(UsageError, match="--burst-on-ms: only with --request-distribution onoff"):
        build_levels(None, "100", "poisson", None, burst_on_ms=20.0)
    with pytest.raises(UsageError, match="needs --request-rate-range"):
        build_levels("4", None, "onoff", None)

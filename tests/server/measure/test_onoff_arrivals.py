"""On/off arrivals against a real server: every due request is sent, and a burst queues."""

from __future__ import annotations

import pytest

from perfkit.measure import profile
from perfkit.records import LoadLevel, ProfileSpec


def test_bursts_are_sent_on_schedule_and_queue_behind_one_instance(triton):
    # sleeper: 10 ms a request, one instance. 40 req/s mean in 50 ms bursts every 200 ms is 8
    # requests 6.25 ms apart: the k-th of a burst waits 3.75 ms * k behind the ones before it,
    # a median near 23 ms where 40 req/s evenly spaced would wait for nothing (10 ms).
    spec = ProfileSpec(
        model="sleeper",
        levels=(LoadLevel("request_rate", 40.0, "onoff", 50.0, 150.0),),
        measurement_interval_ms=1000.0,
        max_trials=5,
        min_windows=5,
        warmup_s=0.3,
    )
    lv = profile(triton, spec).levels[0]
    assert lv.error_count == 0 and lv.dropped_count == 0
    # Whole seconds hold whole cycles: 40 due a second whatever the windows' phase (±1 at each end).
    assert lv.request_count == pytest.approx(40 * lv.duration_s, abs=2)
    assert lv.corrected is not None
    # Queueing behind a burst only grows on a loaded machine, never shrinks: a floor, not a budget.
    assert lv.corrected.p50_us >= 18_000
    assert lv.corrected.max_us >= 33_000  # the last of a burst waited behind seven

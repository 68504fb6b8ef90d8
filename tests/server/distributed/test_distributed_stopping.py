"""The distributed level loop stops as the local one does (one rule, perfkit.measure.LevelStop), on a
real two-node Ray cluster against a real Triton server: a level whose precision is out of reach in its
budget ends early saying so (the drift rule, deterministically: tests/unit/distributed)."""

from __future__ import annotations

import pytest

from perfkit.distributed import profile_distributed
from perfkit.records import LoadLevel, ProfileSpec

pytestmark = [pytest.mark.slow]


def test_a_level_whose_precision_is_out_of_reach_ends_at_window_5_saying_so(triton, ray_cluster):
    # +-0.25% on throughput and +-0.5% on the mean latency of a shared 2-core machine: the precision
    # reached at window 5 says it would take far more than the 10 windows' budget
    spec = ProfileSpec(model="identity", levels=(LoadLevel("concurrency", 2),), measurement_interval_ms=400.0,
                       max_trials=30, warmup_s=0.3, stability_percentage=0.5, tail_percentiles=())  # fmt: skip
    rec = profile_distributed([triton], spec, address=ray_cluster, client_hosts=2)
    lv = rec.levels[0]
    assert not lv.stable and len(lv.windows) == 5, lv.note
    # out of reach, or (on a busy machine) the windows drifted past +-0.25% first: both end at window 5
    assert lv.note.startswith(("ended early: the precision asked would take about ", "ended early, the windows"))
    assert "precision reached" in lv.note
    assert ("past the level's budget of 10" in lv.note) or lv.drift is not None

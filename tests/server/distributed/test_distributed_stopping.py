"""The distributed level loop stops as the local one does (one rule, perfkit.measure.LevelStop): a level
whose windows drift ends early with the drift recorded, one whose precision is out of reach in its
budget ends early saying so; on a real two-node Ray cluster against a real Triton server."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from perfkit.distributed import profile_distributed
from perfkit.measure import ProgressEvent, WindowMeasured, _stopping
from perfkit.records import LoadLevel, ProfileSpec
from perfkit.server import LocalLaunch, launch_local
from perfkit.server.local import LocalServer
from tests.conftest import copy_models

pytestmark = [pytest.mark.usefixtures("tritonserver"), pytest.mark.slow]


@pytest.fixture
def sleeper(tmp_path: Path) -> Iterator[tuple[LocalServer, Path]]:
    repo = copy_models(tmp_path, ["sleeper"])
    with launch_local(LocalLaunch(repo, models=("sleeper",))) as server:
        yield server, repo


def _set_delay(server: LocalServer, repo: Path, delay_ms: int) -> None:
    cfg = repo / "sleeper" / "config.pbtxt"
    cfg.write_text(re.sub(r'string_value: "\d+"', f'string_value: "{delay_ms}"', cfg.read_text()))
    server.load_model("sleeper")


def test_a_level_whose_model_slows_mid_level_ends_early_with_the_drift(sleeper, ray_cluster, monkeypatch):
    server, repo = sleeper
    monkeypatch.setattr(_stopping, "FUTILITY_FACTOR", math.inf)  # the drift alone may end it
    # +-0.2% cannot be reached; no time budget: without the drift rule the level would run 30 windows
    spec = ProfileSpec(model="sleeper", levels=(LoadLevel("concurrency", 2),), measurement_interval_ms=500.0,
                       max_trials=30, warmup_s=0.3, stability_percentage=0.2, level_budget_s=0.0,
                       tail_percentiles=())  # fmt: skip
    slowed: list[int] = []

    def slow_after_window_1(ev: ProgressEvent) -> None:
        if isinstance(ev, WindowMeasured) and ev.window == 1 and not slowed:
            _set_delay(server, repo, 30)  # 10 -> 30 ms per execution: a third of the throughput
            slowed.append(1)

    rec = profile_distributed([server], spec, address=ray_cluster, client_hosts=2, on_progress=slow_after_window_1)
    lv = rec.levels[0]
    assert slowed and not lv.stable
    assert lv.drift is not None, lv.note
    assert len(lv.windows) < 30 and len(lv.workers) == 2
    moved = lv.drift.after / lv.drift.before
    assert moved < 0.6 if lv.drift.metric == "throughput" else moved > 1.6, lv.drift
    assert lv.note.startswith("ended early, the windows drifted: "), lv.note
    assert f"of {len(lv.windows)}" in lv.note or "steadily over" in lv.note


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

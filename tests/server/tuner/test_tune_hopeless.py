"""No trial longer than its answer needs, on a real Triton: a budget under what one request takes
alone (the batcher's execution is a few ms, unbatched with dynamic batching off) is shown by the
open-loop search's first level, one request at a time; the search ends there and the trial is
pruned saying why, instead of walking the arrival rates down to 1 req/s."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfkit.records import RunRecord
from perfkit.server import LocalLaunch, launch_local
from perfkit.tuner import Budget, TuneEvent, TuneSettings, TuneSpace, tune
from perfkit.tuner._events import TrialPruned

pytestmark = [pytest.mark.usefixtures("tritonserver"), pytest.mark.slow]

SPACE = TuneSpace(max_batch_sizes=(8,), dynamic_batching=(False,), instance_counts=(1, 2), precisions=("fp32",))


def test_a_trial_whose_first_level_shows_no_load_holds_ends_there_pruned_saying_why(
    model_repo: Path, tmp_path: Path
) -> None:
    cfg_path = model_repo / "batcher" / "config.pbtxt"
    original = cfg_path.read_bytes()
    out = tmp_path / "out"
    events: list[TuneEvent] = []
    settings = TuneSettings(model="batcher", budget=Budget(1.0), trials=1, output_dir=out, seed=0, load="rate",
                            measurement_interval_ms=300, confirm_repeats=0, search="measure")  # fmt: skip
    with launch_local(LocalLaunch(model_repo, models=("batcher",))) as server:
        result = tune(server, settings, SPACE, model_repository=model_repo, on_event=events.append)
    assert cfg_path.read_bytes() == original
    rec = result.record
    assert [t.state for t in rec.trials] == ["pruned"] and rec.best_trial is None, rec.trials
    reason = rec.trials[0].fail_reason
    assert "no load holds it" in reason and ("service time alone" in reason or "at the least load" in reason), reason
    pruned = [e for e in events if isinstance(e, TrialPruned)]
    assert len(pruned) == 1 and "no load holds it" in pruned[0].line()
    # one level measured: the probe, one request at a time; no arrival rate tried
    levels = RunRecord.load(out / "runs" / "trial-000.json").levels
    assert [lv.load.mode for lv in levels] == ["concurrency"] and levels[0].load.value == 1.0, levels

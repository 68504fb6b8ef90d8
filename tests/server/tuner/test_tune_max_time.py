"""--max-time bounds the trial in flight too, on a real Triton: an open-loop trial whose load search
would run well past the tune's deadline ends there; what it measured of its own load mode still
answers for it (its best held level kept as a lower bound, or pruned where none held), only a search
that measured nothing of it fails (queued again for --resume); and the tune ends normally with a
recommendation: what held its confirmation, else what held its search (your config's own figure
counts). When nothing was measured at all, the tune exits 5 (a run that measured nothing)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfkit.errors import ExitCode
from perfkit.records import RunRecord, TuneRecord, from_dict
from perfkit.server import LocalLaunch, launch_local
from perfkit.tuner import Budget, TuneEvent, TuneSettings, TuneSpace, tune
from perfkit.tuner._events import SearchStopped, Summary, TrialFailed, TrialMeasured, TrialPruned

pytestmark = [pytest.mark.usefixtures("tritonserver"), pytest.mark.slow]

SPACE = TuneSpace(max_batch_sizes=(8,), dynamic_batching=(False,), instance_counts=(1, 2), precisions=("fp32",))
# Open loop, 2 s windows, at least 3 of them: every level of a trial lasts 6.5 s or more, and an
# open-loop search measures at least 4 levels (a rate ladder up to 20000 req/s has its answer inside:
# a level within, one over, that one confirmed, a bisection), so a trial would take 26 s or more
# after it starts; the deadline comes 15 s after the tune began.
SLOW_WINDOW_MS = 2000.0
MAX_TIME_S = 15.0
# How late past the deadline the trial may end: each level is given the windows that fit before it,
# so only the cost of starting and ending a level lies beyond (a few seconds on a busy 2-core machine).
LATE_S = 8.0


def _settings(out: Path, **kw: object) -> TuneSettings:
    base = TuneSettings(model="batcher", budget=Budget(60), trials=1, output_dir=out, seed=0, load="concurrency",
                        max_concurrency=2, measurement_interval_ms=300, confirm_repeats=0,
                        search="measure")  # fmt: skip
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]  # the test's overrides are TuneSettings fields


def test_a_trial_that_would_overrun_max_time_ends_at_the_deadline_and_the_tune_keeps_what_it_has(
    model_repo: Path, tmp_path: Path
) -> None:
    cfg_path = model_repo / "batcher" / "config.pbtxt"
    original = cfg_path.read_bytes()
    out = tmp_path / "out"
    events: list[tuple[float, TuneEvent]] = []
    with launch_local(LocalLaunch(model_repo, models=("batcher",))) as server:
        first = tune(server, _settings(out), SPACE, model_repository=model_repo)  # trial 0: closed loop, quick
        assert [t.state for t in first.record.trials] == ["complete"]
        # Resumed in open loop with slow levels and a deadline: trial 1 cannot finish its load search in time.
        slow = _settings(out, trials=3, resume=True, max_time_s=MAX_TIME_S, load="rate",
                         measurement_interval_ms=SLOW_WINDOW_MS)  # fmt: skip
        began = time.monotonic()
        result = tune(server, slow, SPACE, model_repository=model_repo,
                      on_event=lambda e: events.append((time.monotonic(), e)))  # fmt: skip
    assert cfg_path.read_bytes() == original
    rec = result.record
    assert rec.status == "ok"
    cut = next(t for t in rec.trials if t.number == 1)
    told = "load search cut by --max-time 15 s after"
    ended_by = (TrialFailed, TrialMeasured, TrialPruned)
    ended = next(at for at, e in events if isinstance(e, ended_by) and e.number == 1)
    assert ended - began <= MAX_TIME_S + LATE_S, f"trial 1 ended {ended - began:.1f} s after the tune began"
    stopped = [e.reason for _, e in events if isinstance(e, SearchStopped)]
    assert stopped == ["--max-time 15 s reached"], stopped
    levels = RunRecord.load(out / "runs" / "trial-001.json").levels
    rates = [lv for lv in levels if lv.load.mode == "request_rate"]
    lines = [e.line() for _, e in events]
    if rates:
        # What it measured at arrival rates answers for it: its best held rate kept (a lower bound:
        # the search did not finish above it), or pruned where none held; either way it says so
        assert cut.state in ("complete", "pruned"), cut
        assert any(told in line for line in lines), lines
        if cut.state == "complete":
            assert cut.feasible and cut.rate_is_lower_bound and cut.load in [lv.load for lv in rates], cut
    else:
        # Only the probe's closed-loop level (a busy machine's deadline came before the first rate):
        # nothing judges a rate, the trial ran out of time, queued again for --resume
        assert cut.state == "failed" and cut.fail_reason.startswith("out of time: --max-time 15 s reached"), cut
        measured = int(cut.fail_reason.split("(")[1].split()[0])
        assert measured == len(levels) and [lv.load.mode for lv in levels] in ([], ["concurrency"]), cut.fail_reason
    # The tune ends with a recommendation: trial 0's measurement, or trial 1's held rate
    assert rec.best_trial in (0, 1) and result.best is not None and result.best.feasible
    assert [t.number for t in rec.trials if t.state == "complete"] in ([0], [0, 1])


def test_a_short_max_time_with_confirmation_still_ends_with_a_recommendation(model_repo: Path, tmp_path: Path) -> None:
    """The issue's case in small: an open-loop tune whose --max-time cuts its search and leaves its
    confirmation little time ends with a config to recommend (confirmed, or your config with the
    figure its search read), never with nothing."""
    cfg_path = model_repo / "batcher" / "config.pbtxt"
    original = cfg_path.read_bytes()
    out = tmp_path / "out"
    events: list[TuneEvent] = []
    # measured (the case: precision in the space); the predicted search's calibration alone
    # may take the search's share of so short a time
    settings = _settings(out, trials=None, max_time_s=40.0, load="rate", measurement_interval_ms=500,
                         confirm_repeats=2, confirm_time_s=1.0, search="measure")  # fmt: skip
    with launch_local(LocalLaunch(model_repo, models=("batcher",))) as server:
        result = tune(server, settings, SPACE, model_repository=model_repo, on_event=events.append)
    assert cfg_path.read_bytes() == original
    rec = result.record
    stopped = [e.reason for e in events if isinstance(e, SearchStopped)]
    assert len(stopped) == 1 and stopped[0].startswith("--max-time 40 s reached"), stopped
    assert rec.status == "ok" and rec.best_trial is not None and rec.best_config is not None, rec.trials
    text = "\n".join(line for e in events if isinstance(e, Summary) for line in e.lines)
    assert "nothing to recommend" not in text and ("best: trial" in text or "keep your config" in text), text
    best = rec.trial(rec.best_trial)
    assert best is not None and best.feasible
    if best.confirmation is not None and not best.confirmation.held:
        assert best.is_original and "keep your config (trial 0)" in text, text


def test_a_tune_whose_deadline_comes_before_any_trial_is_measured_exits_5(model_repo: Path, tmp_path: Path) -> None:
    cfg_path = model_repo / "batcher" / "config.pbtxt"
    original = cfg_path.read_bytes()
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "perfkit", "tune", "-m", "batcher", "--model-repository", str(model_repo), "-o",
           str(out), "--latency-budget", "60ms", "--load", "rate", "--measurement-interval", "2000", "--max-time",
           "8s", "--confirm", "0", "--max-batch-sizes", "8", "--no-dynamic-batching", "--instance-counts", "1,2",
           "--precisions", "fp32", "--search", "measure"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                          timeout=300)  # fmt: skip
    log = proc.stdout + proc.stderr
    assert proc.returncode == ExitCode.MEASUREMENT, log
    assert "--max-time 8 s ran out before any trial was measured" in proc.stderr, log
    assert "out of time: --max-time 8 s reached during the load search" in proc.stdout, log
    assert cfg_path.read_bytes() == original
    rec = from_dict(TuneRecord, json.loads((out / "tune.json").read_text()))
    assert rec.status == "failed" and rec.error is not None and "--max-time" in rec.error
    assert [(t.number, t.state) for t in rec.trials] == [(0, "failed")]
    assert rec.trials[0].fail_reason.startswith("out of time")

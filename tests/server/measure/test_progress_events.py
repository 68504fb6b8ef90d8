"""The library reports progress as typed events and logs through `logging`; it prints nothing."""

from __future__ import annotations

import logging

from perfkit.measure import LevelDone, LevelStarted, WindowMeasured, profile
from perfkit.records import LoadLevel, ProfileSpec


def test_profile_emits_typed_events_and_logs_instead_of_printing(triton, caplog, capsys):
    events: list[object] = []
    spec = ProfileSpec(model="identity", levels=(LoadLevel("concurrency", 1),), max_trials=3, tail_percentiles=())
    with caplog.at_level(logging.INFO, logger="perfkit.measure"):
        record = profile(triton, spec, on_progress=events.append)
    kinds = [type(e) for e in events]
    assert kinds[0] is LevelStarted and kinds[-1] is LevelDone
    windows = [e for e in events if isinstance(e, WindowMeasured)]
    assert [w.window for w in windows] == list(range(1, len(record.levels[0].windows) + 1))
    assert events[-1].result == record.levels[0]  # type: ignore[attr-defined]  # the last event of a level is LevelDone
    assert any("concurrency 1" in r.getMessage() for r in caplog.records if r.name == "perfkit.measure")
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""

"""Models sharing one server tuned jointly under a traffic mix (`perfkit tune -m A -m B --mix ...`).

`batcher` and `hungry` share one emulated device (the same cross-process lock in their model.py):
each one's settings change the other's latency, which is what the joint search is for.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from perfkit.cli import main
from perfkit.errors import UsageError
from perfkit.records import Budget, MixShare, RunRecord, level_budget_us, parse_mix_budgets
from tests.conftest import ROOT, copy_models, wait_until
from tests.server.cli.test_signals import _background, _finish, _no_leftovers  # noqa: F401  (the fixture kills leftovers)

MODELS = ("batcher", "hungry")
BUDGETS_MS = {"batcher": 60.0, "hungry": 120.0}
# A small space (batching on or off, one queue delay, one instance, no larger batches) and short
# windows; the budgets are loose: these tests hold behaviour, not figures, on a busy machine. Closed
# loop (not the default): the load mode is not what they test, and it keeps them quick.
MIX = ["-m", "batcher", "-m", "hungry", "--mix", "batcher:3,hungry:1",
       "--latency-budget", "batcher:60ms,hungry:120ms", "--max-batch-sizes", "8", "--instance-counts", "1",
       "--queue-delays-us", "2000", "--preferred-batch-sizes", "none", "--load", "concurrency",
       "--max-concurrency", "8", "--measurement-interval", "300", "--confirm", "0"]  # fmt: skip


def _configs(repo: Path) -> dict[str, bytes]:
    return {m: (repo / m / "config.pbtxt").read_bytes() for m in MODELS}


# -- without a server ---------------------------------------------------------------------------


def test_budgets_per_model_or_one_for_all():
    assert parse_mix_budgets(["a", "b"], "a:20ms,b:0.05s") == {"a": 20.0, "b": 50.0}
    assert parse_mix_budgets(["a", "b"], "30ms") == {"a": 30.0, "b": 30.0}
    for text, names in (
        ("a:20ms", "no budget to -m b"),
        ("a:20ms,c:5ms", "'c', which is not given with -m"),
        ("a:20ms,b", "'b' is not MODEL:BUDGET"),
        ("a:20ms,b:ttft:5ms", "not ttft"),
    ):
        with pytest.raises(UsageError) as err:
            parse_mix_budgets(["a", "b"], text)
        assert names in err.value.one_line(), text


def test_a_mixed_level_is_within_budget_only_when_every_model_is():
    level = RunRecord.load(ROOT / "fixtures" / "records" / "profile_concurrency.json").levels[0]

    def share(model: str, p99_ms: float) -> MixShare:
        lat = dataclasses.replace(level.service, p99_us=p99_ms * 1e3)
        return MixShare(model, 1, dataclasses.replace(level, service=lat, corrected=None, error_count=0))

    mixed = dataclasses.replace(level, models=(share("a", 15.0), share("b", 45.0)), error_count=0)
    scale = {"a": 20.0 / 20.0, "b": 20.0 / 50.0}  # the reference budget is a's (20 ms); b's own is 50 ms
    # the figure is the worst model's percentile scaled to the reference: b's 45 of 50 ms is 90%
    assert level_budget_us(mixed, 99.0, "latency", scale) == pytest.approx(18_000)
    assert Budget(20.0, 99.0, "latency", (("a", 20.0), ("b", 50.0))).mix_scale == scale
    assert Budget(20.0, 99.0, "latency", (("a", 20.0), ("b", 50.0))).within(mixed)
    tight = Budget(20.0, 99.0, "latency", (("a", 20.0), ("b", 40.0)))  # b's 40 ms: 45 is over, whatever the mix's p99
    assert tight.mix_scale == {"a": 1.0, "b": 20.0 / 40.0} and not tight.within(mixed)
    assert Budget(1e6, 99.0, "latency").within(mixed)  # without the mix's scale, the old rule


@pytest.mark.parametrize(
    ("extra", "names"),
    [
        (["--latency-budget", "batcher:20ms"], "no budget to -m hungry"),
        (["--latency-budget", "20ms", "--mix", "batcher:2,nope:1"], "'nope', which is not given with -m"),
        (["--latency-budget", "20ms", "--dry-run"], "--dry-run is not supported when tuning a traffic mix"),
    ],
)
def test_cli_refuses_a_bad_mix_in_one_line(extra, names, tmp_path, capsys):
    code = main(["tune", "-m", "batcher", "-m", "hungry", "--model-repository", str(tmp_path), *extra])
    err = capsys.readouterr().err
    assert code == 2, err
    assert names in err.strip().splitlines()[-1]


# -- against the real server --------------------------------------------------------------------


@pytest.mark.usefixtures("tritonserver")
@pytest.mark.slow
def test_mix_tune_restores_both_configs_after_sigterm(tmp_path: Path) -> None:
    repo = copy_models(tmp_path, list(MODELS))
    before = _configs(repo)
    args = [sys.executable, "-m", "perfkit", "tune", "--model-repository", str(repo), "-o", str(tmp_path / "out"),
            "--trials", "4", *MIX]  # fmt: skip
    proc, out = _background(args)
    pid = int(out.wait_for(r"^pid=(\d+)$").group(1))
    out.wait_for(r"^trial 1/")
    wait_until(lambda: _configs(repo) != before, "a candidate config of the mix to be in place")
    os.kill(pid, signal.SIGTERM)
    rc, text = _finish(proc, out)
    assert rc == 130, text
    assert _configs(repo) == before, text  # both models, byte for byte


@pytest.mark.usefixtures("tritonserver")
@pytest.mark.slow
def test_mix_tune_recommends_a_pair_within_both_budgets_and_applies_it(tmp_path: Path, capsys) -> None:
    repo = copy_models(tmp_path, list(MODELS))
    before = _configs(repo)
    out_dir = tmp_path / "out"
    rc = main(["tune", "--model-repository", str(repo), "-o", str(out_dir), "--trials", "3", "--apply",
               "--report", str(out_dir / "report.html"), *MIX])  # fmt: skip
    printed = capsys.readouterr().out
    assert rc == 0, printed
    assert "perfkit tune: mix batcher:3,hungry:1 (traffic mix)" in printed
    assert "every model within its own budget (batcher 60 ms, hungry 120 ms)" in printed
    # each trial shows every model against its own budget, and where the shared device's time went
    assert "  models: batcher " in printed and " of 60 ms; hungry " in printed and " of 120 ms" in printed
    assert "  steps: batcher queue" in printed and "hungry queue" in printed
    rec = json.loads((out_dir / "tune.json").read_text())
    assert rec["mix"] == [["batcher", 3], ["hungry", 1]] and dict(rec["budget"]["per_model_ms"]) == BUDGETS_MS
    best = rec["best_trial"]
    assert best is not None
    row = next(t for t in rec["trials"] if t["number"] == best)
    # the pick, read back from its own run record: at the load it was credited with, the requests
    # were split by the mix and every model's p99 is within that model's budget
    run = RunRecord.load(out_dir / "runs" / f"trial-{best:03d}.json")
    assert run.spec.mix == (("batcher", 3), ("hungry", 1))
    (level,) = [lv for lv in run.levels if lv.load.value == row["load"]["value"]]
    assert level.error_count == 0 and [s.model for s in level.models] == list(MODELS)
    for share in level.models:
        assert share.result.latency().p99_us <= BUDGETS_MS[share.model] * 1e3
        assert row["metrics"][f"{share.model}.latency_us"] == share.result.latency().p99_us
    assert sum(s.result.request_count for s in level.models) == level.request_count
    page = (out_dir / "report.html").read_text()
    assert "at the traffic mix batcher:3,hungry:1 with every model within its own budget" in page
    # --apply installed the whole best set: each changed model's best config, with a backup
    after = _configs(repo)
    changed = [m for m in MODELS if after[m] != before[m]]
    for m in changed:
        assert (out_dir / "best" / m / "config.pbtxt").read_bytes() == after[m]
        assert (out_dir / "best" / f"{m}.diff").is_file()
        (backup,) = (repo / m).glob("config.pbtxt.bak-*")
        assert backup.read_bytes() == before[m]
    for m in set(MODELS) - set(changed):
        assert after[m] == before[m] and not (out_dir / "best" / m).exists()

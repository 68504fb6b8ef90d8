"""Pipelines tuned end to end on the real server: the three-step `stages` ensemble (every step
restored byte for byte after Ctrl-C; per-step breakdown; best configs per model; --apply of the
whole set) and the `bls_stages` BLS model with --composing-models."""

from __future__ import annotations

import csv
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from perfkit.cli import main
from tests.conftest import CHEAP_CONFIRM, copy_models, wait_until
from tests.server.cli.test_signals import _background, _finish, _no_leftovers  # noqa: F401  (the fixture kills leftovers)

STEPS = ("stage_decode", "stage_infer", "stage_post")
# A small space: dynamic batching on or off per step (queue delay fixed), one instance, no larger
# batches. The budget is loose: these tests hold behaviour, not figures, on a busy machine. Closed
# loop (not the default): the load mode is not what they test, and it keeps them quick.
SPACE = ["--max-batch-sizes", "8", "--instance-counts", "1", "--queue-delays-us", "2000",
         "--preferred-batch-sizes", "none", "--latency-budget", "500ms", "--load", "concurrency",
         "--max-concurrency", "8", "--measurement-interval", "300", *CHEAP_CONFIRM]  # fmt: skip


def _configs(repo: Path, models: tuple[str, ...]) -> dict[str, bytes]:
    return {m: (repo / m / "config.pbtxt").read_bytes() for m in models}


@pytest.mark.usefixtures("tritonserver")
@pytest.mark.slow
def test_ensemble_tuned_end_to_end_restores_every_step_after_sigint(tmp_path: Path) -> None:
    repo = copy_models(tmp_path, ["stages", *STEPS])
    before = _configs(repo, STEPS)
    args = [sys.executable, "-m", "perfkit", "tune", "-m", "stages", "--model-repository", str(repo),
            "-o", str(tmp_path / "out"), "--trials", "4", *SPACE]  # fmt: skip
    proc, out = _background(args)
    pid = int(out.wait_for(r"^pid=(\d+)$").group(1))
    out.wait_for(r"^trial 1/")
    wait_until(lambda: _configs(repo, STEPS) != before, "a step's candidate config to be in place")
    os.kill(pid, signal.SIGINT)
    rc, text = _finish(proc, out)
    assert rc == 130, text
    assert _configs(repo, STEPS) == before, text  # every step, byte for byte


@pytest.mark.usefixtures("tritonserver")
@pytest.mark.slow
def test_ensemble_tune_records_each_step_and_applies_the_whole_best_set(tmp_path: Path, capsys) -> None:
    repo = copy_models(tmp_path, ["stages", *STEPS])
    before = _configs(repo, STEPS)
    out_dir = tmp_path / "out"
    rc = main(["tune", "-m", "stages", "--model-repository", str(repo), "-o", str(out_dir), "--trials", "3",
               "--apply", "--report", str(out_dir / "report.html"), *SPACE])  # fmt: skip
    printed = capsys.readouterr().out
    assert rc == 0, printed
    # Progress shows each trial's per-step breakdown and the step it points at.
    assert "  steps: stage_decode queue" in printed and "bottleneck: stage_" in printed
    assert "queue ms (orig -> best)" in printed  # original and best side by side
    with open(out_dir / "trials.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    measured = [r for r in rows if r["state"] in ("complete", "pruned")]
    assert measured and all(r[f"{m}.compute_us"] for r in measured for m in STEPS)
    assert all(float(r["stage_infer.batch"]) >= 1 for r in measured)
    page = (out_dir / "report.html").read_text()
    assert "Pipeline steps: original and best" in page and "stage_infer" in page
    rec = json.loads((out_dir / "tune.json").read_text())
    best = rec["best_trial"]
    assert best is not None
    # The pipeline's pick is confirmed as a model's is: re-measured end to end before it is claimed.
    best_row = next(t for t in rec["trials"] if t["number"] == best)
    assert best_row["confirmation"] is not None and best_row["confirmation"]["held"], best_row["confirmation"]
    assert "confirmed" in printed
    after = _configs(repo, STEPS)
    changed = [m for m in STEPS if after[m] != before[m]]
    # --apply installed exactly the best set: each changed step's best config, with a backup.
    for m in changed:
        assert (out_dir / "best" / m / "config.pbtxt").read_bytes() == after[m]
        assert (out_dir / "best" / f"{m}.diff").is_file()
        backups = list((repo / m).glob("config.pbtxt.bak-*"))
        assert len(backups) == 1 and backups[0].read_bytes() == before[m]
    for m in set(STEPS) - set(changed):
        assert not (out_dir / "best" / m).exists() and not list((repo / m).glob("config.pbtxt.bak-*"))


@pytest.mark.usefixtures("tritonserver")
@pytest.mark.slow
def test_bls_pipeline_is_tuned_through_the_bls_model(tmp_path: Path, capsys) -> None:
    models = ("bls_stages", "stage_decode", "stage_infer")
    repo = copy_models(tmp_path, list(models))
    before = _configs(repo, models)
    out_dir = tmp_path / "out"
    rc = main(["tune", "-m", "bls_stages", "--composing-models", "stage_decode,stage_infer",
               "--model-repository", str(repo), "-o", str(out_dir), "--trials", "2", "--no-dynamic-batching",
               "--confirm", "0", "--max-batch-sizes", "8", "--instance-counts", "1,2", "--latency-budget", "500ms",
               "--load", "concurrency", "--max-concurrency", "8", "--measurement-interval", "300"])  # fmt: skip
    printed = capsys.readouterr().out
    assert rc == 0, printed
    assert _configs(repo, models) == before
    with open(out_dir / "trials.csv", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["state"] in ("complete", "pruned")]
    # The steps' statistics come from the server although the BLS model names no steps itself.
    assert rows and all(r["stage_decode.compute_us"] and r["stage_infer.compute_us"] for r in rows)
    assert "bls_stages.instance_count" in rows[0]

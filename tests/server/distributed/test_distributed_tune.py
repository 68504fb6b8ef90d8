"""`perfkit tune --ray` with two workers (two servers) on a two-node Ray cluster, one shared study
in a real PostgreSQL: every trial measured once, none lost, none duplicated, configs put back."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import CHEAP_CONFIRM, FIXTURE_MODELS, copy_models
from tests.server.tuner.test_tune_shared import postgres_url  # noqa: F401  (the fixture, shared)

pytestmark = [pytest.mark.usefixtures("tritonserver"), pytest.mark.slow]


def test_tune_on_ray_two_servers_lose_and_duplicate_no_trial(ray_cluster, postgres_url, tmp_path: Path, capsys):  # noqa: F811
    import optuna

    from perfkit.cli import main

    trials = 5
    repo = copy_models(tmp_path, ["batcher"])
    before = (repo / "batcher" / "config.pbtxt").read_bytes()
    out = tmp_path / "out"
    rc = main(["tune", "-m", "batcher", "--model-repository", str(repo), "-o", str(out), "--ray", ray_cluster,
               "--tune-workers", "2", "--storage", postgres_url, "--study-name", "shared", "--trials", str(trials),
               "--latency-budget", "50ms", "--load", "concurrency", "--max-concurrency", "2",
               "--measurement-interval", "300",
               "--max-batch-sizes", "8", "--no-dynamic-batching", "--instance-counts", "1,2,3",
               "--precisions", "fp32,fp16,int8", *CHEAP_CONFIRM])  # fmt: skip
    text = capsys.readouterr()
    assert rc == 0, text.out + text.err
    assert "worker 0" in text.out and "worker 1" in text.out

    study = optuna.load_study(study_name="shared", storage=postgres_url)
    all_trials = study.get_trials(deepcopy=False)
    measured = [t for t in all_trials if t.user_attrs.get("duplicate_of") is None]
    assert len({t.number for t in all_trials}) == len(all_trials)
    assert trials <= len(measured) <= trials + 1  # both may ask at once for the last one
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in measured), [t.state for t in measured]
    for t in measured:  # measured by exactly one worker
        owners = [w for w in (0, 1) if (out / f"worker-{w}" / "runs" / f"trial-{t.number:03d}.json").is_file()]
        assert len(owners) == 1, (t.number, owners)
    assert len({t.user_attrs["worker"] for t in measured}) == 2  # both workers measured
    assert sum(1 for t in all_trials if t.user_attrs.get("is_original")) == 1
    # the user's repository is untouched (each worker tuned a private copy)
    assert (repo / "batcher" / "config.pbtxt").read_bytes() == before
    assert before == (FIXTURE_MODELS / "batcher" / "config.pbtxt").read_bytes()


def test_tune_on_ray_refuses_apply(tmp_path: Path, capsys):
    from perfkit.cli import main

    repo = copy_models(tmp_path, ["batcher"])
    rc = main(["tune", "-m", "batcher", "--model-repository", str(repo), "--latency-budget", "20ms",
               "--ray", "auto", "--apply"])  # fmt: skip
    assert rc == 2
    assert "--apply with --ray" in capsys.readouterr().err

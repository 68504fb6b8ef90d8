"""Two `perfkit tune` workers, each with its own local Triton, share one Optuna study in a
real PostgreSQL: every trial is measured once, none is lost, none is duplicated."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import CHEAP_CONFIRM, copy_models, require

pytestmark = [pytest.mark.usefixtures("tritonserver"), pytest.mark.slow]


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, env=env, timeout=300)
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "postgresql"],
                       capture_output=True, env=env, timeout=600)  # fmt: skip
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A throwaway PostgreSQL cluster on a free port (run as a non-root user when we are root)."""
    bindir = _pg_bin()
    require("PostgreSQL", bindir, "and could not be installed: apt-get install postgresql")
    tmp = Path(tempfile.mkdtemp(prefix="perfkit-pg-"))
    data = tmp / "data"
    prefix: list[str] = []
    if os.geteuid() == 0:
        user = "postgres" if shutil.which("runuser") and _has_user("postgres") else "nobody"
        shutil.chown(tmp, user)
        os.chmod(tmp, 0o700)
        prefix = ["runuser", "-u", user, "--"]
    port = _free_port()
    init = subprocess.run([*prefix, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "perfkit"],
                          capture_output=True, text=True)  # fmt: skip
    if init.returncode != 0:
        pytest.fail(f"initdb failed: {init.stderr}")
    opts = f"-p {port} -k {tmp} -c listen_addresses=127.0.0.1 -c max_connections=50"
    start = subprocess.run([*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(tmp / "log"),
                            "-w", "start"], capture_output=True, text=True)  # fmt: skip
    if start.returncode != 0:
        pytest.fail(
            f"pg_ctl start failed: {start.stderr} {(tmp / 'log').read_text() if (tmp / 'log').exists() else ''}"
        )
    try:
        yield f"postgresql+psycopg2://perfkit@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True)  # fmt: skip
        shutil.rmtree(tmp, ignore_errors=True)


def _has_user(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


# quiet: every trial must hold the 20 ms budget at concurrency 1, a verdict on a latency budget that
# a loaded parallel run can read over (trials pruned)
@pytest.mark.quiet
def test_two_workers_share_one_study_without_losing_or_repeating_trials(postgres_url: str, tmp_path: Path):
    import optuna

    trials = 5
    procs = []
    for worker in ("a", "b"):
        repo = copy_models(tmp_path / worker, ["batcher"])
        cmd = [sys.executable, "-m", "perfkit", "tune", "-m", "batcher", "--model-repository", str(repo),
               "-o", str(tmp_path / f"out-{worker}"), "--storage", postgres_url, "--study-name", "shared",
               "--trials", str(trials), "--latency-budget", "20ms", "--load", "concurrency", "--max-concurrency", "2",
               "--measurement-interval", "300", "--max-batch-sizes", "8", "--no-dynamic-batching",
               "--instance-counts", "1,2,3", "--precisions", "fp32,fp16,int8", "--search", "measure",
               *CHEAP_CONFIRM]  # fmt: skip
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    logs = [p.communicate(timeout=400)[0] for p in procs]
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log

    study = optuna.load_study(study_name="shared", storage=postgres_url)
    all_trials = study.get_trials(deepcopy=False)
    measured = [t for t in all_trials if t.user_attrs.get("duplicate_of") is None]
    numbers = [t.number for t in all_trials]
    assert len(numbers) == len(set(numbers))
    # Each worker checks the budget before asking; at most one trial more when both ask at once.
    assert trials <= len(measured) <= trials + 1, logs
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in measured), [
        (t.number, t.state, t.user_attrs.get("fail_reason")) for t in measured
    ]
    # Every measured trial ran on exactly one worker: its run record is in exactly one output folder.
    for t in measured:
        owners = [w for w in ("a", "b") if (tmp_path / f"out-{w}" / "runs" / f"trial-{t.number:03d}.json").is_file()]
        assert len(owners) == 1, (t.number, owners)
    # Both workers did work, and the original config was measured once.
    workers = {t.user_attrs["worker"] for t in measured}
    assert len(workers) == 2, logs
    assert sum(1 for t in all_trials if t.user_attrs.get("is_original")) == 1
    for w in ("a", "b"):
        assert (tmp_path / w / "models" / "batcher" / "config.pbtxt").read_bytes() == (
            Path(__file__).resolve().parents[3] / "fixtures" / "models" / "batcher" / "config.pbtxt"
        ).read_bytes()

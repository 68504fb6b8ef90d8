"""Sweep files: parsed into specs, and every mistake reported as one line naming file and key (exit 3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfkit.campaign import load_sweep
from perfkit.cli import main
from perfkit.errors import ConfigError
from perfkit.records import LoadLevel

ROOT = Path(__file__).resolve().parents[3]
GOOD = """
name = "demo"
[server]
launch_mode = "local"
model_repository = "models"
env = { OMP_NUM_THREADS = "1" }
[load]
levels = [1, 2]
measurement_interval_ms = 400
percentile = 99
[[models]]
name = "sleeper"
[[models]]
name = "batcher"
load = { mode = "request_rate", levels = [50, 100], distribution = "poisson", batch_size = 2 }
[gate]
baseline = "baselines/"
thresholds = ["throughput:-10%", "p99:+2ms"]
job_noise = ["p99:5%"]
allow_different_machine = true
[output]
dir = "out"
store = "results.sqlite"
"""


def _write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "models").mkdir(exist_ok=True)
    path = tmp_path / "s.toml"
    path.write_text(text)
    return path


def test_a_good_sweep_becomes_specs(tmp_path):
    sweep = load_sweep(_write(tmp_path, GOOD))
    assert sweep.name == "demo"
    assert sweep.server["model_repository"] == tmp_path / "models"  # relative to the file
    sleeper, batcher = sweep.models
    assert sleeper.spec.levels == (LoadLevel("concurrency", 1.0), LoadLevel("concurrency", 2.0))
    assert sleeper.spec.measurement_interval_ms == 400.0 and sleeper.spec.percentile == 99.0
    assert batcher.spec.levels[0] == LoadLevel("request_rate", 50.0, "poisson")
    assert batcher.spec.batch_size == 2 and batcher.spec.measurement_interval_ms == 400.0  # defaults kept
    assert sweep.gate is not None and sweep.gate.baseline == str(tmp_path / "baselines")
    assert sweep.gate.allow_different_machine and sweep.gate.thresholds == ("throughput:-10%", "p99:+2ms")
    from perfkit.campaign.run import gate_options

    assert gate_options(sweep).job_noise_pct["p99"] == 5.0  # the sweep's allowance reaches the gate
    assert sweep.output_dir == tmp_path / "out" and sweep.store == str(tmp_path / "results.sqlite")


@pytest.mark.parametrize(
    "path",
    [p for p in sorted((ROOT / "sweeps").glob("*.toml")) if not p.name.startswith("tune-")],
    ids=lambda p: p.name,
)
def test_shipped_sweeps_are_valid(path):
    assert load_sweep(path).models


@pytest.mark.parametrize(
    ("old", "new", "key", "expected"),
    [
        ("levels = [1, 2]", 'levels = "1,2"', "models[0].load.levels", "a non-empty list of positive numbers"),
        ("levels = [1, 2]", "levels = [1.5]", "models[0].load.levels", "whole numbers"),
        ("measurement_interval_ms = 400", 'measurement_interval_ms = "fast"', "measurement_interval_ms", "number"),
        ('launch_mode = "local"', 'launch_mode = "k8s"', "server.launch_mode", "'local' or 'docker' or 'remote'"),
        ('model_repository = "models"', 'model_repository = "nope"', "server.model_repository", "an existing folder"),
        ('name = "demo"', 'nmae = "demo"', "nmae", "top-level keys"),
        ("percentile = 99", "percentil = 99", "[load].percentil", "unknown key"),
        ('"p99:+2ms"', '"p99:+2"', "gate.thresholds", "METRIC:CHANGE"),
        ('job_noise = ["p99:5%"]', 'job_noise = ["p99:5"]', "gate.job_noise", "METRIC:PERCENT%"),
        ('job_noise = ["p99:5%"]', 'job_noise = "p99:5%"', "gate.job_noise", "a list of strings"),
        ('baseline = "baselines/"', "baseline = 3", "gate.baseline", "a string"),
        ("allow_different_machine = true", 'allow_different_machine = "yes"', "gate.allow_different_machine", "true"),
        ('name = "batcher"', 'name = "sleeper"', "models[1].name", "each model once"),
        ('distribution = "poisson"', 'distribution = "gamma"', "models[1].load.distribution", "'constant'"),
        ("percentile = 99", "percentile = 100", "percentile", "between 0 and 100"),
        ('env = { OMP_NUM_THREADS = "1" }', "env = 3", "server.env", "a table of strings"),
    ],
)
def test_mistakes_name_the_file_and_key(tmp_path, old, new, key, expected):
    assert old in GOOD
    path = _write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(ConfigError) as err:
        load_sweep(path)
    line = err.value.one_line()
    assert str(path) in line and key in line and expected in line, line
    assert "\n" not in line


def test_no_models_and_bad_toml(tmp_path):
    with pytest.raises(ConfigError, match="models: expected a non-empty array"):
        load_sweep(_write(tmp_path, GOOD.split("[[models]]", maxsplit=1)[0]))
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_sweep(_write(tmp_path, "[server\n"))
    with pytest.raises(ConfigError, match="does not exist"):
        load_sweep(tmp_path / "missing.toml")


def test_tune_table_is_checked_by_the_tuner(tmp_path):
    with pytest.raises(ConfigError, match=r"\[tune\]"):
        load_sweep(_write(tmp_path, GOOD + '\n[tune]\nlatency_budget = "20ms"\nmax_batch_sizse = [1]\n'))
    sweep = load_sweep(_write(tmp_path, GOOD + '\n[tune]\nlatency_budget = "20ms"\ntrials = 4\n'))
    assert sweep.tune is not None and sweep.tune["trials"] == 4
    (tmp_path / "space.toml").write_text('[tune]\nlatency_budget = "5ms"\ninstance_counts = [1, 2]\n')
    sweep = load_sweep(_write(tmp_path, 'tune = "space.toml"\n' + GOOD))
    assert sweep.tune is not None and sweep.tune["instance_counts"] == [1, 2]


def test_cli_exit_3_one_line(tmp_path, capsys):
    path = _write(tmp_path, GOOD.replace("levels = [1, 2]", "levels = []"))
    assert main(["run", str(path)]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("perfkit: error: ") and "levels" in err[0]
    assert main(["run", str(_write(tmp_path, GOOD)), "--check"]) == 0
    assert "sleeper: concurrency 1, concurrency 2" in capsys.readouterr().out

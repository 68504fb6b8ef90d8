"""The simulator's compiled loop (perfkit/predict/_simloop.py, numba) costs nothing to commands that
never simulate, and is compiled once per machine: processes started together with an empty cache
all run it, a later process loads it from the cache, and with no writable cache directory each
process compiles its own; without numba, simulating is a one-line error. No server."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from perfkit.errors import UsageError
from perfkit.predict import BatcherConfig, Load, ServiceModel, simulate
from tests.conftest import require

# One process: simulate, then say whether the loop came from numba's cache and what it predicted.
SIMULATE = """
import json
from perfkit.predict import BatcherConfig, Contention, Load, ServiceModel, simulate
from perfkit.predict import _simloop
p = simulate(BatcherConfig(16, True, (4, 8), 2_000.0, 2), ServiceModel(2_000, 300, 200),
             Load("poisson", rate_rps=1_500), Contention(0.5), requests=3_000)
stats = _simloop.run_open.stats
print(json.dumps({"file": _simloop.__file__, "hits": sum(stats.cache_hits.values()),
                  "misses": sum(stats.cache_misses.values()), "p99_us": p.p99_us, "mean_batch": p.mean_batch}))
"""


def _start(cache_dir: str, cwd: Path | None = None, **env: str) -> subprocess.Popen[str]:
    env = {**os.environ, "NUMBA_CACHE_DIR": cache_dir, **env}
    for name in ("NUMBA_DISABLE_JIT", "XDG_CACHE_HOME"):
        env.pop(name, None)
    return subprocess.Popen(
        [sys.executable, "-c", SIMULATE], env=env, cwd=cwd, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _result(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    return {**json.loads(out), "stderr": err}


def test_the_loop_compiles_once_and_later_processes_load_it(tmp_path):
    require("numba (the simulator's compiled loop)", importlib.util.find_spec("numba"), "pip install -e . installs it")
    cache = str(tmp_path / "numba-cache")
    # Two processes at once on an empty cache (parallel test workers on a fresh checkout): each
    # compiles or loads what another wrote, none fails, all predict the same.
    together = [_result(p) for p in [_start(cache) for _ in range(2)]]
    assert {(r["p99_us"], r["mean_batch"]) for r in together} == {(together[0]["p99_us"], together[0]["mean_batch"])}
    assert sum(r["misses"] for r in together) >= 1
    assert any(name.endswith(".nbi") for name in os.listdir(os.path.join(cache, os.listdir(cache)[0])))
    later = _result(_start(cache))
    assert (later["hits"], later["misses"]) == (1, 0)  # loaded, not compiled
    assert (later["p99_us"], later["mean_batch"]) == (together[0]["p99_us"], together[0]["mean_batch"])


def test_with_no_writable_cache_directory_each_process_compiles_its_own(tmp_path):
    # A read-only install for a user with no writable home: numba refuses cache=True there, so
    # the loop is compiled uncached, with a warning that says how to keep it.
    require("numba (the simulator's compiled loop)", importlib.util.find_spec("numba"), "pip install -e . installs it")
    package = Path(__file__).resolve().parents[3] / "perfkit"
    copy = tmp_path / "site"
    shutil.copytree(package, copy / "perfkit", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    (copy / "perfkit" / "predict" / "__pycache__").write_text("")  # not a directory: nothing goes beside the module
    (tmp_path / "home").write_text("")  # not a directory: no ~/.cache/numba under it
    env = {"PYTHONPATH": str(copy), "HOME": str(tmp_path / "home" / "user"), "PYTHONDONTWRITEBYTECODE": "1"}
    got = _result(_start("", cwd=tmp_path, **env))  # NUMBA_CACHE_DIR empty: numba's own choice
    assert got["file"] == str(copy / "perfkit" / "predict" / "_simloop.py")
    assert (got["hits"], got["misses"]) == (0, 1)
    assert "compiled for this process only" in got["stderr"]
    assert "NUMBA_CACHE_DIR" in got["stderr"]
    normal = _result(_start(str(tmp_path / "cache")))
    assert (got["p99_us"], got["mean_batch"]) == (normal["p99_us"], normal["mean_batch"])


# What a command imports, as its own process: numba must not be among it unless it simulates.
COMMAND = """
import sys
from perfkit.cli import main
sys.argv = ["perfkit", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
print("numba imported" if "numba" in sys.modules else "numba not imported", file=sys.stderr)
"""


def test_no_command_imports_numba_until_it_simulates():
    for args in ([], ["--help"], ["tune", "--help"], ["plan", "--help"]):
        run = subprocess.run([sys.executable, "-c", COMMAND, *args], capture_output=True, text=True, timeout=120)
        assert run.stderr.strip().endswith("numba not imported"), (args, run.stderr[-500:])
    code = "import sys, perfkit.predict, perfkit.capacity, perfkit.tuner; print('numba' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


def test_a_missing_numba_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch):
    import perfkit.predict
    from perfkit.predict import _sim

    monkeypatch.setitem(sys.modules, "perfkit.predict._simloop", None)  # its import fails, as without numba
    monkeypatch.delattr(perfkit.predict, "_simloop", raising=False)
    _sim._compiled_loop.cache_clear()
    try:
        with pytest.raises(UsageError, match="needs numba") as err:
            simulate(BatcherConfig(), ServiceModel(1_000, 0), Load("poisson", rate_rps=100), requests=100)
        assert "\n" not in err.value.one_line() and "reinstall perfkit" in err.value.one_line()
        # The reference loop needs no numba.
        p = simulate(BatcherConfig(), ServiceModel(1_000, 0), Load("poisson", rate_rps=100), requests=100,
                     loop="reference")  # fmt: skip
        assert p.requests == 90
    finally:
        _sim._compiled_loop.cache_clear()

"""The simulator's compiled loop (perfkit/predict/_simloop.py, numba) costs nothing to commands that
never simulate, and is compiled once per machine: processes started together with an empty cache
all run it, and a later process loads it from the cache. No server."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

from tests.conftest import require

# One process: simulate, then say whether the loop came from numba's cache and what it predicted.
SIMULATE = """
import json
from perfkit.predict import BatcherConfig, Contention, Load, ServiceModel, simulate
from perfkit.predict import _simloop
p = simulate(BatcherConfig(16, True, (4, 8), 2_000.0, 2), ServiceModel(2_000, 300, 200),
             Load("poisson", rate_rps=1_500), Contention(0.5), requests=3_000)
stats = _simloop.run_open.stats
print(json.dumps({"hits": sum(stats.cache_hits.values()), "misses": sum(stats.cache_misses.values()),
                  "p99_us": p.p99_us, "mean_batch": p.mean_batch}))
"""


def _start(cache_dir: str) -> subprocess.Popen[str]:
    env = {**os.environ, "NUMBA_CACHE_DIR": cache_dir}
    env.pop("NUMBA_DISABLE_JIT", None)
    return subprocess.Popen([sys.executable, "-c", SIMULATE], env=env, stdout=subprocess.PIPE, text=True)


def _result(proc: subprocess.Popen[str]) -> dict[str, float]:
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0
    return json.loads(out)


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

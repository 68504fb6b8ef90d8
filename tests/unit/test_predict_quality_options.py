"""benchmarks/predict_quality.py's options and perf_analyzer levels, without a server: --phases,
the window length at low rates, and --table on a saved run."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks._pa_rate import WINDOW_REQUESTS, window_ms
from benchmarks.predict_quality import PHASES, parse_phases

ROOT = Path(__file__).resolve().parents[2]


def test_phases_are_an_order_of_predict_grid_and_measure() -> None:
    assert parse_phases("grid, predict,measure") == ("grid", "predict", "measure")
    assert parse_phases("grid") == ("grid",)
    assert PHASES == ("predict", "grid", "measure")
    for bad in ("", "grid,grid", "predict,confirm"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_phases(bad)


def test_a_window_holds_at_least_100_requests() -> None:
    assert window_ms(600.0, 3.0) == 1000  # 600 requests a window already
    assert window_ms(13.0, 3.0) * 13.0 / 1000 >= WINDOW_REQUESTS  # ~7.7 s, not 1 s
    assert window_ms(50.0, 3.0) == 2000


def test_the_table_of_a_saved_run_without_phases_and_with_a_grid_first(tmp_path: Path) -> None:
    grid = {"mbs 64 batching x1": 400.0, "no batching x1": 20.0}
    subject = {"subject": "hungry", "kind": "model", "budget_ms": 150.0, "grid": grid,
               "predicted": {"mbs 64 batching x1": 500.0},
               "searches": {"predict": {"pick": "mbs 64 batching x1", "claim_rps": 390.0, "remeasured_rps": 380.0,
                                        "trials": 3, "wall_s": 100.0}}}  # fmt: skip
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps({"date": "x", "subjects": [subject]}))
    new.write_text(json.dumps({"date": "x", "phases": ["grid", "predict"], "subjects": [subject]}))
    for path, head in ((old, "| subject |"), (new, "Phases, in order: grid, predict.")):
        done = subprocess.run([sys.executable, "benchmarks/predict_quality.py", "--table", str(path)], cwd=ROOT,
                              capture_output=True, text=True, check=True, env={"PYTHONPATH": str(ROOT)})  # fmt: skip
        assert done.stdout.startswith(head)
        assert "| hungry | `--search predict` | mbs 64 batching x1 | 1.00; 0.95 |" in done.stdout
        assert "| mbs 64 batching x1 | 400 | 500 | +25% |" in done.stdout
        assert "measured (today's)" not in done.stdout


def test_server_cpus_name_cpus_this_process_may_use_and_leave_the_clients_some() -> None:
    from benchmarks._cpus import parse_cpus

    every = sorted(os.sched_getaffinity(0))
    assert parse_cpus(str(every[0])) == frozenset({every[0]})
    assert parse_cpus(f"{every[0]}-{every[0]}") == frozenset({every[0]})
    for bad in ("", "x", "1-y", ",".join(map(str, every)), str(max(every) + 1)):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_cpus(bad)


def test_pinning_apart_puts_the_servers_whole_tree_on_its_cpus_and_this_process_on_the_others() -> None:
    # In a child interpreter (pinning changes the calling process's own CPUs): a "server" whose
    # child process already runs, pinned to the first CPU; the caller keeps the rest.
    script = """
import os, subprocess, sys, time
from pathlib import Path
from benchmarks._cpus import pin_apart
every = sorted(os.sched_getaffinity(0))
server = subprocess.Popen(["sh", "-c", "sleep 30 >/dev/null 2>&1 & wait"])
child = None
for _ in range(500):
    kids = [int(p.parent.name) for p in Path("/proc").glob("[0-9]*/stat")
            if p.read_text().rsplit(")", 1)[1].split()[1] == str(server.pid)]
    if kids:
        child = kids[0]
        break
    time.sleep(0.01)
rest = pin_apart(server.pid, frozenset({every[0]}))
print(sorted(os.sched_getaffinity(server.pid)), sorted(os.sched_getaffinity(child)),
      sorted(os.sched_getaffinity(0)), sorted(rest), every)
os.kill(child, 9)
server.kill()
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True,
                          env={"PYTHONPATH": str(ROOT)}, timeout=60)  # fmt: skip
    server, child, mine, rest, every = (json.loads(part + "]") for part in done.stdout.strip()[:-1].split("] "))
    assert len(every) >= 2, "the benchmark's CI machine has 2 cores"
    assert server == child == every[:1]
    assert mine == rest == every[1:]

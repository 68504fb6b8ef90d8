"""benchmarks/predict_quality.py's options and perf_analyzer levels, without a server: --phases,
the window length at low rates, and --table on a saved run."""

from __future__ import annotations

import argparse
import json
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

"""History over real runs: short `perfkit profile` runs of the sleeper fixture into a store, with a
slowdown injected part-way (its delay_ms parameter raised from 10 to 20 ms, as a merge would), and
`perfkit history` finding it, failing CI on it, and drawing the history report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfkit.cli import main
from perfkit.errors import ExitCode
from perfkit.server import LocalLaunch, launch_local
from tests.conftest import copy_models

# 6 runs a side: with fewer, even a perfect split is not significant at alpha 0.01 (a permutation
# test on n runs, k after the change, cannot go much below 1 / C(n, k): C(9, 4) = 126)
RUNS = 12
SLOW_FROM = 6  # runs 0-5 at 10 ms, runs 6-11 at 20 ms


@pytest.mark.usefixtures("tritonserver")
def test_history_of_real_fixture_runs_finds_the_injected_slowdown(tmp_path: Path, capsys):
    repo = copy_models(tmp_path, ["sleeper"])
    store = tmp_path / "results.sqlite"
    with launch_local(LocalLaunch(repo, models=("sleeper",))) as server:
        url = server.endpoints.http_url
        for i in range(RUNS):
            if i == SLOW_FROM:
                config = server.model_config("sleeper")
                config["parameters"]["delay_ms"]["string_value"] = "20"
                server.load_model("sleeper", config=config)  # served config changes; the file stays as it was
            out = tmp_path / f"run{i}.json"
            args = ["profile", "-m", "sleeper", "-u", url, "--concurrency-range", "2", "-o", str(out),
                    "--measurement-interval", "400", "--max-trials", "8", "--tail-percentiles", "50"]  # fmt: skip
            assert main(args) == ExitCode.OK
            assert main(["baseline", "save", str(out), "--store", str(store)]) == ExitCode.OK
    capsys.readouterr()

    html, data = tmp_path / "reports" / "history.html", tmp_path / "history.json"
    rc = main(["history", "--store", str(store), "--fail-on-change", "--html", str(html), "--json", str(data)])
    out = capsys.readouterr().out
    assert rc == ExitCode.HISTORY_CHANGE, out
    changes = json.loads(data.read_text())["changes"]
    throughput = [c for c in changes if c["metric"] == "throughput"]
    p50 = [c for c in changes if c["metric"] == "p50"]
    # closed loop at 10 -> 20 ms: throughput ~ -50%, p50 ~ +100% (far past what a loaded shared
    # runner moves them by); found at the first slow run
    assert [(c["index"], c["direction"]) for c in throughput] == [(SLOW_FROM, "regression")], out
    assert [(c["index"], c["direction"]) for c in p50] == [(SLOW_FROM, "regression")], out
    assert -65 < throughput[0]["change_pct"] < -30
    page = html.read_text()
    assert "sleeper · concurrency 2 · throughput" in page and "regression" in page

"""Distributed load on a real two-node Ray cluster against real Triton servers.

The cluster is two Ray nodes on this machine (tests/conftest.py `ray_cluster`); Ray places
one load worker per node. What must hold: the schedule is split exactly, counts add up,
every worker's clock offset is measured and recorded, a killed worker is reported with its
partial results kept, and a fleet's per-server breakdown adds up to the fleet total.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from perfkit.distributed import profile_distributed
from perfkit.measure import ProgressEvent, WindowMeasured, WorkersPlaced
from perfkit.records import LoadLevel, ProfileSpec, RunRecord
from perfkit.server import LocalLaunch, launch_local

pytestmark = [pytest.mark.slow]


def _spec(level: LoadLevel, **kw: Any) -> ProfileSpec:
    base: dict[str, Any] = {
        "measurement_interval_ms": 400.0,
        "max_trials": 4,
        "min_windows": 4,
        "warmup_s": 0.3,
        "stability_percentage": 50.0,
    }
    base.update(kw)
    return ProfileSpec(model="identity", levels=(level,), **base)


def test_closed_loop_over_two_nodes_adds_up(triton, ray_cluster, tmp_path: Path):
    out = tmp_path / "run.json"
    rec = profile_distributed([triton], _spec(LoadLevel("concurrency", 2)), address=ray_cluster,
                              client_hosts=2, record_path=out)  # fmt: skip
    lv = rec.levels[0]
    assert lv.error_count == 0 and lv.service.count > 20
    # one worker per node, each with a share of the concurrency, each clock tied to the coordinator
    assert len(lv.workers) == 2
    assert len({w.node for w in lv.workers}) == 2
    assert all(w.request_count > 0 and w.status == "ok" for w in lv.workers)
    assert sum(w.request_count for w in lv.workers) == lv.request_count
    assert all(w.clock_uncertainty_ns > 0 for w in lv.workers)
    # the merged windows add up to the level's completions inside the measurement period
    assert sum(w.completed for w in lv.windows) == lv.inference_count
    assert len(rec.distributed["workers"]) == 2 and rec.distributed["clock_uncertainty_max_ns"] > 0
    # the saved record reads back with the distributed fields
    again = RunRecord.load(out)
    assert again.levels[0].workers == lv.workers and again.distributed == rec.distributed


def test_open_loop_rate_split_exactly_over_two_nodes(triton, ray_cluster):
    rate = 200.0
    rec = profile_distributed([triton], _spec(LoadLevel("request_rate", rate, "constant")), address=ray_cluster,
                              client_hosts=2)  # fmt: skip
    lv = rec.levels[0]
    due_in_period = rate * lv.duration_s
    # every due time of the period belongs to exactly one worker: interleaved halves
    assert abs(lv.request_count - due_in_period) <= 2
    a, b = (w.request_count for w in lv.workers)
    assert abs(a - b) <= 1
    # late and dropped sends are counted, per worker and in total
    assert lv.late_count == sum(w.late_count for w in lv.workers)
    assert lv.dropped_count == sum(w.dropped_count for w in lv.workers)
    # accounting: each request of the period was sent or dropped
    assert round(lv.sent_rps * lv.duration_s) + lv.dropped_count == lv.request_count
    assert lv.corrected is not None and lv.corrected.count + lv.error_count >= lv.request_count - lv.dropped_count
    # what crossed the network: digests, not ~28 bytes per request; and each worker's cost is recorded
    assert all(w.digest_bytes > 0 and w.cpu_s > 0 and w.max_rss_bytes > 0 for w in lv.workers)


def test_a_killed_worker_is_reported_and_its_partial_results_kept(triton, ray_cluster):
    pids: dict[int, int] = {}
    killed: list[int] = []

    def progress(ev: ProgressEvent) -> None:
        if isinstance(ev, WorkersPlaced):
            pids.update({w.worker: w.pid for w in ev.workers})
        elif isinstance(ev, WindowMeasured) and ev.window == 1 and not killed:
            os.kill(pids[1], signal.SIGKILL)  # our own worker process, started by this run
            killed.append(pids[1])

    spec = dataclasses.replace(
        _spec(LoadLevel("concurrency", 2)), levels=(LoadLevel("concurrency", 2), LoadLevel("request_rate", 150.0))
    )
    rec = profile_distributed([triton], spec, address=ray_cluster, client_hosts=2, on_progress=progress)
    lv = rec.levels[0]
    assert lv.incomplete and not lv.stable
    dead = [w for w in lv.workers if w.status == "died"]
    assert [w.worker for w in dead] == [1]
    assert dead[0].request_count > 0  # what it reported before dying is kept
    assert "worker 1" in lv.note and "died" in lv.note
    assert [w["status"] for w in rec.distributed["workers"]] == ["ok", "died"]
    assert sum(w.request_count for w in lv.workers) == lv.request_count
    # the next level goes on with the survivor, which takes the whole rate
    nxt = rec.levels[1]
    assert [w.worker for w in nxt.workers] == [0] and not nxt.incomplete
    assert abs(nxt.request_count - 150.0 * nxt.duration_s) <= 2


def test_fleet_of_two_servers_breakdown_adds_up(triton, ray_cluster, model_repo: Path, tmp_path: Path):
    with launch_local(LocalLaunch(model_repo, models=["identity"])) as second:
        rec = profile_distributed([triton, second], _spec(LoadLevel("concurrency", 4)), address=ray_cluster,
                                  client_hosts=2)  # fmt: skip
    lv = rec.levels[0]
    assert [s.url for s in lv.fleet] == [triton.endpoints.http_url, second.endpoints.http_url]
    assert all(s.request_count > 0 for s in lv.fleet)
    assert sum(s.request_count for s in lv.fleet) == lv.request_count
    assert sum(s.service.count for s in lv.fleet) == lv.service.count
    # each server's own statistics: it saw (at least) the requests sent to it in the period
    for s in lv.fleet:
        assert s.server is not None and s.server.request_count >= s.service.count * 0.5
    assert rec.distributed["servers"] == [s.url for s in lv.fleet]
    # the report shows the fleet total and each server's share, and the workers
    from perfkit.report import write_profile_report

    html = write_profile_report([rec], tmp_path / "report.html").read_text()
    assert "Fleet: total and per server" in html and "fleet total" in html
    assert second.endpoints.http_url in html and "Load workers (Ray)" in html


def test_cli_profile_on_ray_against_a_fleet_file(triton, ray_cluster, tmp_path: Path, capsys):
    from perfkit.cli import main

    fleet = tmp_path / "servers.txt"
    fleet.write_text(f"# the fleet\n{triton.endpoints.http_url}\n{triton.endpoints.http_url}  # same server twice\n")
    out = tmp_path / "run.json"
    args = ["profile", "-m", "identity", "-u", f"@{fleet}", "--ray", ray_cluster, "--client-hosts", "2",
            "--concurrency-range", "2", "-p", "300", "-r", "3", "--min-windows", "3", "-o", str(out)]  # fmt: skip
    rc = main(args)
    text = capsys.readouterr().out
    assert rc == 0, text
    rec = RunRecord.load(out)
    assert len(rec.levels[0].fleet) == 2 and len(rec.levels[0].workers) == 2
    assert f"server {triton.endpoints.http_url}:" in text and "clock offset" in text


def test_digests_of_real_samples_merge_to_what_one_process_records(triton):
    """Real samples from one engine against Triton, split between two 'workers' by request: the
    merged digests equal the one recorder's figures (counts exactly, percentiles to the bucket)."""
    from time import perf_counter_ns

    from perfkit.distributed import MergedWindows, level_digest, merge_counts, merge_summaries, window_digest
    from perfkit.loadgen import EngineConfig, LoadGenerator, ModelIO, http_payload, synthetic_tensors
    from perfkit.recorder import LevelRecorder, summarize
    from perfkit.records import Samples
    from perfkit.server.remote import parse_host_port

    io = ModelIO.from_server(triton.model_metadata("identity"), triton.model_config("identity"), "")
    host, port = parse_host_port(triton.endpoints.http_url)
    tensors = synthetic_tensors(io, mode="random", batch_size=1, shapes={}, string_length=16, seed=0)
    payload = http_payload(io, tensors, triton.endpoints.http_url)
    window_ns, windows = 250_000_000, 4
    with LoadGenerator(EngineConfig("http", host, port, (payload,)), workers=1) as gen:
        t0 = gen.start(LoadLevel("concurrency", 2))
        start = t0 + 100_000_000
        end = start + windows * window_ns
        # the level's windows are defined by time: let them pass (plus stragglers' margin)
        time.sleep(max(0.0, (end + 50_000_000 - perf_counter_ns()) / 1e9))
        samples = gen.stop()
    assert len(samples) > 100

    def recorder() -> LevelRecorder:
        return LevelRecorder(start_ns=start, window_ns=window_ns, closed_loop=True, batch_size=1)

    one = recorder()
    one.add(samples)
    halves = []
    for i in range(2):
        pick = slice(i, None, 2)
        r = recorder()
        r.add(Samples(samples.due_ns[pick], samples.sent_ns[pick], samples.done_ns[pick], samples.status[pick]))
        halves.append(r)
    merged = MergedWindows()
    for k in range(1, windows + 1):
        merged.add([window_digest(r, k) for r in halves])
    digests = [level_digest(r, end) for r in halves]
    counts = merge_counts([d.counts for d in digests], [None, None])
    want = one.counts(end)
    assert (counts.request_count, counts.inference_count, counts.error_count) == (
        want.request_count,
        want.inference_count,
        want.error_count,
    )
    single = summarize("service", one.latencies_us(end, "service"))
    got = merge_summaries("service", [d.service for d in digests])
    assert (got.count, got.min_us, got.max_us) == (single.count, single.min_us, single.max_us)
    assert got.mean_us == pytest.approx(single.mean_us, rel=1e-9)
    assert (got.p50_us, got.p90_us, got.p99_us) == (single.p50_us, single.p90_us, single.p99_us)
    assert [w.completed for w in merged.windows] == [w.completed for w in one.windows(windows)]


def test_workers_go_only_to_nodes_offering_the_client_resource(triton, ray_cluster):
    from perfkit.errors import UsageError

    rec = profile_distributed([triton], _spec(LoadLevel("concurrency", 2), max_trials=1, min_windows=1),
                              address=ray_cluster, client_hosts=2, node_resource="perfkit_client")  # fmt: skip
    lv = rec.levels[0]
    assert len(lv.workers) == 2 and len({w.node for w in lv.workers}) == 1  # both on the labelled node
    assert rec.distributed["node_resource"] == "perfkit_client"
    with pytest.raises(UsageError, match="no live node"):
        profile_distributed([triton], _spec(LoadLevel("concurrency", 1)), address=ray_cluster,
                            node_resource="no_such_resource")  # fmt: skip

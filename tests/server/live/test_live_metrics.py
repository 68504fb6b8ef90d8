"""Live metrics: the exporter over synthetic events, and a real Prometheus scraping a real profile.

The server test: `perfkit profile --metrics-port` against the bundled Triton, Debian's Prometheus
scraping perfkit and Triton's own metrics every second; the counters in Prometheus equal the run
record's, and every query of the Grafana dashboard in dashboards/ runs (and the ones that do not
need a GPU return data).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from perfkit.gate.synthetic import synthetic_level
from perfkit.live import LiveMetrics
from perfkit.measure import LevelDone, LevelStarted, WindowMeasured
from perfkit.records import LevelCounts, Precision, RunRecord
from perfkit.server._ports import free_ports
from tests.conftest import FIXTURE_MODELS, ROOT, Lines

DASHBOARD = ROOT / "dashboards" / "perfkit-triton.json"


def _samples(exporter: LiveMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(exporter.registry).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _counts(n: int, errors: dict[str, int], dropped: int = 0, late: int = 0) -> LevelCounts:
    return LevelCounts(
        n, n - sum(errors.values()), 100.0, 10.0, 10.0, sum(errors.values()), errors, late, dropped, None
    )


def test_exporter_counts_equal_the_level_result_and_histograms_count_latencies():
    level = synthetic_level(concurrency=2, errors=3)
    exporter = LiveMetrics(model="sleeper")
    exporter.handle(LevelStarted(level.load))
    lat_us = np.array([150.0, 900.0, 2500.0, 40_000.0])
    exporter.handle(
        WindowMeasured(
            level.load,
            1,
            100.0,
            900.0,
            Precision(0.1, 0.2),
            lambda: _counts(50, {"connection reset": 1}),
            lambda: (lat_us, None),
        )
    )
    mid = _samples(exporter)
    key = (("level", "concurrency 2"), ("model", "sleeper"))
    assert mid[("perfkit_requests_offered_total", key)] == 50
    assert mid[("perfkit_requests_completed_total", key)] == 49
    assert mid[("perfkit_level_current", key)] == 1
    hist = (("kind", "service"), *key)
    assert mid[("perfkit_request_latency_seconds_count", hist)] == 4
    assert mid[("perfkit_request_latency_seconds_bucket", (("kind", "service"), ("le", "0.0016"), *key))] == 2
    assert mid[("perfkit_request_latency_seconds_sum", hist)] == pytest.approx(lat_us.sum() / 1e6)

    exporter.handle(LevelDone(level.load, level))
    done = _samples(exporter)
    assert done[("perfkit_requests_offered_total", key)] == level.request_count
    assert done[("perfkit_requests_completed_total", key)] == level.request_count - level.error_count
    assert done[("perfkit_requests_failed_total", (("kind", "connection reset"), *key))] == 3
    assert done[("perfkit_level_stable", key)] == 1
    assert done[("perfkit_level_current", key)] == 0


def test_exporter_serves_on_loopback_and_refuses_a_taken_port():
    exporter = LiveMetrics(model="m")
    port = exporter.serve("127.0.0.1", 0)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            assert resp.status == 200
        other = LiveMetrics()
        from perfkit.errors import PortInUseError

        with pytest.raises(PortInUseError, match=f"--metrics-port {port}"):
            other.serve("127.0.0.1", port)
    finally:
        exporter.close()


def _dashboard_queries() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]


@pytest.mark.usefixtures("tritonserver")
def test_prometheus_scrapes_a_profile_and_the_dashboard_queries_return_data(tmp_path: Path, prometheus):
    metrics_port, triton_metrics_port = free_ports(2)
    prom = prometheus([f"127.0.0.1:{metrics_port}", f"127.0.0.1:{triton_metrics_port}"])
    record_path = tmp_path / "run.json"
    cmd = [
        sys.executable, "-m", "perfkit", "profile", "-m", "identity", "--model-repository", str(FIXTURE_MODELS),
        "--concurrency-range", "1:2", "--measurement-interval", "500", "-o", str(record_path),
        "--metrics-port", str(metrics_port), "--server-metrics-port", str(triton_metrics_port),
        "--metrics-linger", "4",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = Lines(proc.stdout)  # type: ignore[arg-type]  # stdout=PIPE above, so it is never None
    out.wait_for(rf"metrics on http://127\.0\.0\.1:{metrics_port}/metrics")
    out.wait_for(r"run record saved to")
    # Queried at a moment perfkit still served its final values (it lingers 4 s, Prometheus scrapes
    # every 1 s): once the target is gone, Prometheus marks its series stale and "now" has none.
    at = time.time() + 2.5
    assert proc.wait(timeout=120) == 0, out.join()

    record = RunRecord.load(record_path)
    by_level = {r["metric"]["level"]: float(r["value"][1]) for r in prom.query("perfkit_requests_completed_total", at)}
    offered = {r["metric"]["level"]: float(r["value"][1]) for r in prom.query("perfkit_requests_offered_total", at)}
    assert set(by_level) == {lv.load.label for lv in record.levels}
    for lv in record.levels:
        assert by_level[lv.load.label] == lv.request_count - lv.error_count
        assert offered[lv.load.label] == lv.request_count
    failed = prom.query("sum(perfkit_requests_failed_total) or vector(0)", at)
    assert float(failed[0]["value"][1]) == sum(lv.error_count for lv in record.levels)

    # every query of the dashboard, with its variables filled in, runs; all but the GPU panel's return data
    for expr in _dashboard_queries():
        q = expr.replace("$model", "identity").replace("$__rate_interval", "5m")
        result = prom.query(q, at)
        if "nv_gpu" in q:
            continue  # no GPU here: Triton exports no GPU series (the query is still checked to be valid)
        assert result, f"dashboard query returned no data: {q}"


def test_streamed_levels_export_ttft_itl_histograms_and_tokens():
    import dataclasses

    from perfkit.recorder import summarize
    from perfkit.records import StreamingSummary

    ttft_us = np.array([20_000.0, 30_000.0, 45_000.0])
    itl_us = np.array([5_000.0] * 10)
    streaming = StreamingSummary(
        summarize("service", ttft_us), summarize("service", itl_us), summarize("service", itl_us[:3]),
        output_len_mean=4.0, output_len_p50=4.0, output_len_p99=4.0, output_len_max=4, responses_per_s=10.0,
        output_tokens_per_s=10.0, request_count=3,
    )  # fmt: skip
    level = dataclasses.replace(synthetic_level(), streaming=streaming)
    exporter = LiveMetrics(model="streamer")
    exporter.handle(LevelDone(level.load, level))
    got = _samples(exporter)
    key = (("level", "concurrency 1"), ("model", "streamer"))
    assert got[("perfkit_time_to_first_token_seconds_count", key)] == 3
    assert got[("perfkit_inter_token_latency_seconds_count", key)] == 10
    assert got[("perfkit_inter_token_latency_seconds_bucket", (("le", "0.0032"), *key))] == 0
    assert got[("perfkit_inter_token_latency_seconds_bucket", (("le", "0.0064"), *key))] == 10
    assert got[("perfkit_output_tokens_total", key)] == 12


def test_tune_events_become_trial_series():
    from perfkit.tuner._events import TrialMeasured, TrialPruned, TrialStarted

    exporter = LiveMetrics(model="sleeper")
    exporter.handle(TrialStarted(3, 12, "mbs=16 db=on"))
    exporter.handle(TrialMeasured(3, 450.0, 8, 99.0, 18.5, True, 2.0, 20.0, 4))
    exporter.handle(TrialStarted(4, 12, "mbs=32 db=on"))
    exporter.handle(TrialPruned(4, "slower than the best", 3.0))
    got = _samples(exporter)
    assert got[("perfkit_tune_trials_total", (("model", "sleeper"), ("outcome", "started")))] == 2
    assert got[("perfkit_tune_trials_total", (("model", "sleeper"), ("outcome", "feasible")))] == 1
    assert got[("perfkit_tune_trials_total", (("model", "sleeper"), ("outcome", "pruned")))] == 1
    assert got[("perfkit_tune_trial", ())] == 4
    assert got[("perfkit_tune_trial_throughput_inferences_per_second", ())] == 450.0
    assert got[("perfkit_tune_trial_latency_seconds", ())] == pytest.approx(0.0185)
    info = (("model", "sleeper"), ("parameters", "mbs=32 db=on"), ("trial", "4"))
    assert got[("perfkit_tune_trial_parameters_info", info)] == 1


def test_a_campaign_publishes_each_models_record_under_its_own_name():
    from perfkit.gate.synthetic import synthetic_record

    exporter = LiveMetrics()  # perfkit run: no model on the command line
    for model in ("identity", "sleeper"):
        exporter.handle(synthetic_record(model=model, errors=2))
    got = _samples(exporter)
    for model in ("identity", "sleeper"):
        key = (("level", "concurrency 4"), ("model", model))
        level = synthetic_record(model=model, errors=2).levels[1]
        assert got[("perfkit_requests_completed_total", key)] == level.request_count - level.error_count


def test_metrics_options_serve_during_the_command_and_close_after():
    import click
    from click.testing import CliRunner

    from perfkit.cli._metrics_options import metrics_options, publish
    from perfkit.gate.synthetic import synthetic_record

    seen: list[str] = []

    @click.command()
    @metrics_options
    @click.option("--model")
    def cmd(model: str) -> None:
        publish(synthetic_record(model=model))
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            seen.append(resp.read().decode())

    port = free_ports(1)[0]
    result = CliRunner().invoke(cmd, ["--model", "sleeper", "--metrics-port", str(port)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert f"metrics on http://127.0.0.1:{port}/metrics" in result.output
    (text,) = seen
    assert 'perfkit_requests_completed_total{level="concurrency 1",model="sleeper"}' in text
    with pytest.raises(OSError):  # the endpoint stopped with the command
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)
    publish(synthetic_record())  # no exporter serving: nothing happens

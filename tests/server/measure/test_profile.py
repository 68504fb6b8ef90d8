"""The measurement engine against the real server: truth, inputs, shared memory, failures."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from perfkit.errors import InputError, UsageError
from perfkit.measure import levels_frame, profile, write_csv
from perfkit.measure._csv import PA_COLUMNS
from perfkit.records import LoadLevel, ProfileSpec, RunRecord
from perfkit.server import LocalLaunch, launch_local
from tests.conftest import Lines, copy_models


def _spec(model: str, *levels: LoadLevel, **kw) -> ProfileSpec:
    base = {"measurement_interval_ms": 500.0, "max_trials": 6, "min_windows": 3, "warmup_s": 0.3}
    base.update(kw)
    return ProfileSpec(model=model, levels=levels, **base)


def test_known_latency_matches_and_agrees_with_server_stats(triton):
    rec = profile(triton, _spec("sleeper", LoadLevel("concurrency", 1), percentile=50))
    lv = rec.levels[0]
    assert lv.error_count == 0 and lv.service.count > 50
    srv = lv.server
    assert srv is not None
    # The model sleeps 10 ms: a floor on what the server and the client can see, on any machine.
    # How close to it perfkit comes (its overhead) is a figure: benchmarks/timing_accuracy.py.
    assert srv.compute_infer_avg_us >= 10_000
    assert lv.service.p50_us >= 10_000 and lv.service.min_us >= 10_000
    assert srv.execution_count == pytest.approx(lv.request_count, rel=0.1)


def test_open_loop_stays_open_under_overload(triton):
    spec = _spec(
        "sleeper",
        LoadLevel("request_rate", 150, "constant"),
        measurement_interval_ms=1000.0,
        max_trials=10,
        min_windows=10,
    )
    lv = profile(triton, spec).levels[0]
    assert lv.duration_s == pytest.approx(10, abs=0.01)
    assert lv.request_count + lv.dropped_count == round(150 * lv.duration_s)  # every due request is sent
    assert lv.completed_rps < lv.sent_rps  # the server (10 ms, one instance) falls behind
    assert lv.dropped_count == 0
    assert not lv.stable  # a growing backlog is never reported as a stable result
    assert lv.corrected is not None
    assert lv.corrected.p99_us > 1_000_000  # the backlog shows: seconds, not milliseconds
    assert lv.send_lateness_p99_us is not None  # its size is a figure: benchmarks/timing_accuracy.py


def test_grpc_and_http_both_measure(triton):
    for protocol in ("http", "grpc"):
        rec = profile(triton, _spec("identity", LoadLevel("concurrency", 2), protocol=protocol, max_trials=3))
        lv = rec.levels[0]
        assert lv.error_count == 0 and lv.throughput_infer_per_s > 100, protocol
        assert rec.server.protocol == protocol and rec.server.version.startswith("2.")


def test_batch_size_counts_inferences(triton):
    rec = profile(triton, _spec("identity", LoadLevel("concurrency", 1), batch_size=4, max_trials=3))
    lv = rec.levels[0]
    assert lv.inference_count == 4 * sum(w.completed for w in lv.windows)
    assert lv.server is not None and lv.server.batch_sizes == {"4": lv.server.execution_count}


def test_worker_processes_merge(triton):
    rec = profile(
        triton,
        _spec("identity", LoadLevel("concurrency", 2), LoadLevel("request_rate", 200), workers=2, max_trials=3),
    )
    closed, open_ = rec.levels
    assert closed.error_count == 0 and closed.throughput_infer_per_s > 100
    assert open_.request_count + open_.dropped_count == round(200 * open_.duration_s)  # both workers' sends
    assert open_.service.count == open_.request_count


# quiet: "on time" (at most 2% of sends late) is a verdict on the machine's scheduling, which other
# workers' load makes late by itself; the invariant beside it (sent + dropped = rate x duration) holds either way.
@pytest.mark.quiet
def test_worker_processes_start_an_open_loop_on_time(triton):
    # The first level of a run starts while the spawned workers may still be importing: the
    # schedule must wait for them, not begin in the past (every early send would then be late).
    rec = profile(triton, _spec("identity", LoadLevel("request_rate", 100), workers=2, max_trials=3))
    lv = rec.levels[0]
    sent = lv.request_count
    assert sent + lv.dropped_count == round(100 * lv.duration_s)
    assert lv.dropped_count == 0 and lv.late_count <= max(2, 0.02 * sent), (lv.late_count, sent)


def test_bytes_vardims_and_json_data(triton, tmp_path):
    rec = profile(triton, _spec("strings", LoadLevel("concurrency", 1), string_length=7, max_trials=3))
    assert rec.levels[0].error_count == 0 and rec.levels[0].service.count > 0
    rec = profile(triton, _spec("vardims", LoadLevel("concurrency", 1), shapes={"INPUT0": (3, 4)}, max_trials=3))
    assert rec.levels[0].error_count == 0
    data = tmp_path / "data.json"
    data.write_text(
        json.dumps({"data": [{"INPUT0": {"content": list(range(16)), "shape": [16]}}, {"INPUT0": [1.5] * 16}]})
    )
    rec = profile(
        triton, _spec("identity", LoadLevel("concurrency", 1), input_data=str(data), batch_size=2, max_trials=3)
    )
    assert rec.levels[0].error_count == 0


def test_bad_inputs_are_clear_errors(triton, tmp_path):
    with pytest.raises(InputError, match=r"variable dims") as info:
        profile(triton, _spec("vardims", LoadLevel("concurrency", 1)))
    assert "--shape INPUT0:4,4" in info.value.one_line()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"data": [{"INPUT1": [1.0] * 16}]}))
    with pytest.raises(InputError, match=r"bad.json: data\[0\] names \['INPUT1'\]"):
        profile(triton, _spec("identity", LoadLevel("concurrency", 1), input_data=str(bad)))
    short = tmp_path / "short.json"
    short.write_text(json.dumps({"data": [{"INPUT0": [1.0] * 5}]}))
    with pytest.raises(InputError, match=r"5 values do not fill shape \[16\]"):
        profile(triton, _spec("identity", LoadLevel("concurrency", 1), input_data=str(short)))
    with pytest.raises(UsageError, match="max_batch_size"):
        profile(triton, _spec("identity", LoadLevel("concurrency", 1), batch_size=64))


def test_system_shared_memory_is_registered_used_and_cleaned_up(triton):
    rec = profile(triton, _spec("identity", LoadLevel("concurrency", 2), shared_memory="system", max_trials=3))
    assert rec.levels[0].error_count == 0 and rec.levels[0].service.count > 0
    status, regions = triton._request("GET", "/v2/systemsharedmemory/status")
    assert status == 200 and not [r for r in regions if "perfkit" in r.get("name", "")]
    assert not [f for f in os.listdir("/dev/shm") if f.startswith(f"perfkit_{os.getpid()}_")]


def test_cuda_shared_memory_without_cuda_is_a_clear_error(triton):
    with pytest.raises(UsageError, match="CUDA"):
        profile(triton, _spec("identity", LoadLevel("concurrency", 1), shared_memory="cuda"))


def test_dataframe_and_perf_analyzer_csv(triton, tmp_path):
    rec = profile(triton, _spec("identity", LoadLevel("concurrency", 1), LoadLevel("concurrency", 2), max_trials=3))
    frame = levels_frame(rec)
    assert list(frame["load"]) == [1, 2] and (frame["throughput_infer_per_s"] > 0).all()
    path = write_csv(rec, tmp_path / "out.csv")
    header = path.read_text().splitlines()[0].split(",")
    assert header == PA_COLUMNS
    row = path.read_text().splitlines()[1].split(",")
    assert float(row[1]) == pytest.approx(rec.levels[0].throughput_infer_per_s, rel=1e-3)
    assert RunRecord.from_dict(json.loads(rec.to_json())) == rec  # the record round-trips whole


def _cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "perfkit", *args], capture_output=True, text=True, timeout=timeout)


def test_cli_unknown_model_and_unreachable_server(triton, tmp_path):
    out = _cli("profile", "-m", "nope", "-u", triton.endpoints.http_url, "-o", str(tmp_path / "r.json"))
    assert out.returncode == 3, out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("perfkit: error: model 'nope' is not available")
    out = _cli("profile", "-m", "identity", "-u", "127.0.0.1:9", "-o", str(tmp_path / "r.json"))
    assert out.returncode == 4
    assert "unreachable" in out.stderr and "Traceback" not in out.stderr


def test_cli_profile_writes_record_before_summary(triton, tmp_path):
    rec_path, csv_path = tmp_path / "run.json", tmp_path / "run.csv"
    out = _cli(
        "profile", "-m", "identity", "-u", triton.endpoints.http_url, "--concurrency-range", "1:2",
        "-p", "400", "-r", "3", "-o", str(rec_path), "-f", str(csv_path),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    record = RunRecord.load(rec_path)
    assert [lv.load.value for lv in record.levels] == [1, 2]
    assert "concurrency 2" in out.stdout and csv_path.exists()


@pytest.mark.usefixtures("tritonserver")
def test_server_dying_mid_run_saves_partial_record_and_fails(tmp_path):
    repo = copy_models(tmp_path, ["sleeper"])
    rec_path = tmp_path / "partial.json"
    with launch_local(LocalLaunch(repo)) as server:
        proc = subprocess.Popen(
            [sys.executable, "-m", "perfkit", "profile", "-m", "sleeper", "-u", server.endpoints.http_url,
             "--concurrency-range", "1:8", "-p", "500", "-r", "4", "-o", str(rec_path)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert proc.stderr is not None
        err_lines = Lines(proc.stderr)
        err_lines.wait_for("measuring concurrency 2")  # the first level finished and was saved
        os.killpg(server.pid, signal.SIGKILL)
        proc.wait(timeout=120)
        err = err_lines.join()
    assert proc.returncode == 5, err
    record = RunRecord.load(rec_path)
    assert record.status == "failed" and record.error
    assert len(record.levels) >= 1 and record.levels[0].error_count == 0


def test_grpc_fast_path_reports_server_errors_by_kind(triton):
    from perfkit.loadgen import EngineConfig, LoadGenerator, ModelIO, grpc_payload, synthetic_tensors
    from perfkit.records import GRPC_STATUS_BASE

    io = ModelIO.from_server(triton.model_metadata("identity"), triton.model_config("identity"))
    tensors = synthetic_tensors(io, mode="zero", batch_size=1, shapes={}, string_length=1, seed=0)
    wrong = ModelIO("no_such_model", "", io.max_batch_size, io.inputs, io.outputs)
    host, port = triton.endpoints.grpc_url.rsplit(":", 1)
    cfg = EngineConfig("grpc", host, int(port), (grpc_payload(wrong, tensors),))
    with LoadGenerator(cfg) as gen:
        gen.start(LoadLevel("concurrency", 2))
        time.sleep(0.3)
        samples = gen.stop(5)
    assert len(samples) > 10
    assert (samples.status > GRPC_STATUS_BASE).all()  # every call failed, each one counted
    message = " ".join(samples.error_examples.values())
    assert "no_such_model" in message


def test_latency_threshold_ends_the_sweep_and_binary_search_finds_the_edge(triton):
    fast = {"measurement_interval_ms": 300.0, "max_trials": 3, "min_windows": 2, "percentile": 50.0}
    levels = tuple(LoadLevel("concurrency", c) for c in range(1, 9))
    rec = profile(triton, _spec("sleeper", *levels, latency_threshold_ms=25.0, **fast))
    # 10 ms per request, one at a time: p50 grows ~10 ms per step of concurrency, so some level
    # before 8 is past 25 ms (which one depends on the machine): the sweep stops right there.
    p50_us = [lv.latency().percentile_us(50.0) for lv in rec.levels]
    assert len(rec.levels) < len(levels)
    assert all(v <= 25_000 for v in p50_us[:-1]) and p50_us[-1] > 25_000
    rec = profile(triton, _spec("sleeper", *levels, latency_threshold_ms=25.0, binary_search=True, **fast))
    measured = [lv.load.value for lv in rec.levels]
    assert len(measured) <= 4 and measured == sorted(measured)  # log2(8) + 1 probes at most
    within = [lv.load.value for lv in rec.levels if lv.latency().percentile_us(50.0) <= 25_000]
    over = [lv.load.value for lv in rec.levels if lv.latency().percentile_us(50.0) > 25_000]
    assert within and over and max(within) + 1 == min(over)  # the edge, with both sides measured


def test_ctrl_c_saves_what_was_measured_and_cleans_up_shared_memory(triton, tmp_path):
    rec_path = tmp_path / "interrupted.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "perfkit", "profile", "-m", "identity", "-u", triton.endpoints.http_url,
         "--concurrency-range", "1:3", "-p", "500", "-r", "20", "--min-windows", "20",
         "--shared-memory", "system", "-o", str(rec_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    err_lines = Lines(proc.stderr)
    err_lines.wait_for("measuring concurrency 2")  # the first level (10 s) is done and saved
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    err = err_lines.join()
    assert proc.returncode == 130, err
    record = RunRecord.load(rec_path)
    assert record.status == "interrupted" and len(record.levels) == 1
    assert not [f for f in os.listdir("/dev/shm") if f.startswith(f"perfkit_{proc.pid}_")]
    status, regions = triton._request("GET", "/v2/systemsharedmemory/status")
    assert not [r for r in regions if r.get("name", "").startswith(f"perfkit_{proc.pid}_")]


def test_shared_memory_refused_for_consent_is_one_line_exit_4_and_leaves_nothing(triton, tmp_path, monkeypatch):
    """The bundled server (2.51.0) accepts shared memory, so the refusal of Triton 2.69.0+ started
    without --allow-client-shm cannot be produced by it: a STAND-IN answers the registrations as
    that server does (HTTP 501 and the exact text of its src/common.h), everything else is the
    real server. The run stops before any load with the one-line server refusal (exit 4), its
    record saved as failed, and no region left behind on either side."""
    from perfkit.errors import ExitCode, ServerRefusedError
    from perfkit.server._client_shm import CLIENT_SHM_DISABLED

    real = triton._request

    def no_consent(method, path, body=None, timeout_s=None):
        if "sharedmemory/region/" in path and path.endswith(("/register", "/unregister")):
            return 501, {"error": CLIENT_SHM_DISABLED}  # the stand-in: what only a newer server says
        return real(method, path, body, timeout_s)

    monkeypatch.setattr(triton, "_request", no_consent)
    out = tmp_path / "run.json"
    with pytest.raises(ServerRefusedError) as info:
        profile(triton, _spec("identity", LoadLevel("concurrency", 1), shared_memory="system"), record_path=out)
    assert info.value.exit_code == ExitCode.SERVER
    line = info.value.one_line()
    assert "--allow-client-shm=true" in line and "\n" not in line
    rec = RunRecord.load(out)
    assert rec.status == "failed" and not rec.levels
    monkeypatch.undo()
    status, regions = triton._request("GET", "/v2/systemsharedmemory/status")
    assert status == 200 and not [r for r in regions if "perfkit" in r.get("name", "")]
    assert not [f for f in os.listdir("/dev/shm") if f.startswith(f"perfkit_{os.getpid()}_")]

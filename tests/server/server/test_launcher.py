"""The local launcher against the real bundled tritonserver."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from perfkit.errors import (
    BinaryNotFoundError,
    InputError,
    ModelLoadError,
    PortInUseError,
    ServerError,
    ServerStartError,
)
from perfkit.server import LocalLaunch, launch_local
from perfkit.server._ports import free_ports
from tests.conftest import copy_models


def _pids_in_group(pgid: int) -> list[int]:
    out = subprocess.run(["ps", "-e", "-o", "pid=,pgid="], capture_output=True, text=True, check=True).stdout
    return [int(p) for p, g in (line.split() for line in out.splitlines()) if int(g) == pgid]


def _wait_gone(pgid: int, timeout_s: float = 30.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    left = _pids_in_group(pgid)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = _pids_in_group(pgid)
    return left


def _infer_http(url: str, model: str, name: str, array: np.ndarray, out: str) -> np.ndarray:
    client = httpclient.InferenceServerClient(url)
    dtype = "BYTES" if array.dtype == object else {np.float32: "FP32"}[array.dtype.type]
    inp = httpclient.InferInput(name, list(array.shape), dtype)
    inp.set_data_from_numpy(array)
    return client.infer(model, [inp]).as_numpy(out)


def test_every_fixture_model_answers_a_real_inference(triton):
    ready = {m["name"] for m in triton.repository_index() if m.get("state") == "READY"}
    assert ready == {
        "accumulator",
        "accumulator_oldest",
        "admission",
        "batcher",
        "bls_stages",
        "cacheable",
        "hungry",
        "identity",
        "image",
        "pipeline",
        "preprocess",
        "queue",
        "sleeper",
        "stage_decode",
        "stage_infer",
        "stage_post",
        "stages",
        "stream_held",
        "streamer",
        "strings",
        "vardims",
    }  # fmt: skip  (streamer and the accumulators are exercised in test_streaming_server.py)
    url = triton.endpoints.http_url
    x = np.arange(32, dtype=np.float32).reshape(2, 16)
    np.testing.assert_array_equal(_infer_http(url, "batcher", "INPUT0", x, "OUTPUT0"), 2 * x + 1)
    np.testing.assert_array_equal(_infer_http(url, "identity", "INPUT0", x, "OUTPUT0"), x)
    np.testing.assert_allclose(_infer_http(url, "pipeline", "RAW", x, "RESULT"), 2 * (x / 255.0) + 1, rtol=1e-6)
    # stages: decode (x/2 + 1/2) -> infer (2x + 1/2) -> post (x + 1/2); bls_stages calls the first two itself.
    np.testing.assert_allclose(_infer_http(url, "stages", "INPUT0", x, "OUTPUT0"), x + 2, rtol=1e-6)
    np.testing.assert_allclose(_infer_http(url, "bls_stages", "INPUT0", x, "OUTPUT0"), x + 1.5, rtol=1e-6)
    c = np.arange(16, dtype=np.float32)
    np.testing.assert_array_equal(_infer_http(url, "cacheable", "INPUT0", c, "OUTPUT0"), 2 * c)
    v = np.ones((3, 4), dtype=np.float32)
    np.testing.assert_array_equal(_infer_http(url, "vardims", "INPUT0", v, "OUTPUT0"), 2 * v)
    s = np.array([[b"triton"], [b"perf"]], dtype=object)
    assert _infer_http(url, "strings", "TEXT", s, "UPPER").reshape(-1).tolist() == [b"TRITON", b"PERF"]
    # gRPC answers too, on its own port
    client = grpcclient.InferenceServerClient(triton.endpoints.grpc_url)
    inp = grpcclient.InferInput("INPUT0", [1, 1], "FP32")
    inp.set_data_from_numpy(np.array([[4.0]], dtype=np.float32))
    assert client.infer("sleeper", [inp]).as_numpy("OUTPUT0").tolist() == [[4.0]]
    one = grpcclient.InferInput("INPUT0", [1], "FP32")  # queue: no batching, echoes after its service time
    one.set_data_from_numpy(np.array([2.5], dtype=np.float32))
    assert client.infer("queue", [one]).as_numpy("OUTPUT0").tolist() == [2.5]


def test_server_binds_loopback_with_explicit_model_control(triton):
    assert triton.endpoints.host == "127.0.0.1"
    cmdline = Path(f"/proc/{triton.pid}/cmdline").read_bytes().split(b"\0")
    assert b"--model-control-mode=explicit" in cmdline
    assert b"--http-address=127.0.0.1" in cmdline and b"--grpc-address=127.0.0.1" in cmdline
    assert triton.version().count(".") == 2


@pytest.mark.usefixtures("tritonserver")
def test_two_servers_side_by_side_then_teardown_leaves_nothing(tmp_path):
    repo = copy_models(tmp_path, ["identity", "sleeper"])
    with launch_local(LocalLaunch(repo)) as a, launch_local(LocalLaunch(repo)) as b:
        ports_a = {a.endpoints.http_port, a.endpoints.grpc_port, a.endpoints.metrics_port}
        ports_b = {b.endpoints.http_port, b.endpoints.grpc_port, b.endpoints.metrics_port}
        assert not ports_a & ports_b
        x = np.ones((1, 16), dtype=np.float32)
        for server in (a, b):
            np.testing.assert_array_equal(_infer_http(server.endpoints.http_url, "identity", "INPUT0", x, "OUTPUT0"), x)
        groups = [a.pid, b.pid]
        assert all(_pids_in_group(g) for g in groups)  # server and its python stubs
    for g in groups:
        assert _wait_gone(g, 5) == []


@pytest.mark.usefixtures("tritonserver")
def test_exception_inside_the_block_still_stops_the_server(tmp_path):
    repo = copy_models(tmp_path, ["identity"])
    pgid = None
    with pytest.raises(RuntimeError, match="mid-way"):  # noqa: PT012
        with launch_local(LocalLaunch(repo)) as server:
            pgid = server.pid
            raise RuntimeError("mid-way")
    assert pgid is not None and _wait_gone(pgid, 5) == []


@pytest.mark.usefixtures("tritonserver")
def test_no_orphan_when_the_parent_is_killed(tmp_path):
    repo = copy_models(tmp_path, ["identity"])
    script = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from perfkit.server import LocalLaunch, launch_local
        s = launch_local(LocalLaunch(Path({str(repo)!r})))
        print(s.pid, flush=True)
        time.sleep(600)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    server_pid = int(parent.stdout.readline())
    assert _pids_in_group(server_pid)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    assert _wait_gone(server_pid, 30) == []


@pytest.mark.usefixtures("tritonserver")
def test_serve_command_stops_cleanly_on_ctrl_c(tmp_path):
    repo = copy_models(tmp_path, ["identity"])
    proc = subprocess.Popen(
        [sys.executable, "-m", "perfkit", "serve", "--model-repository", str(repo)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    lines = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        lines.append(line)
        if line.strip().startswith("models"):
            break
    out = "".join(lines)
    assert "HTTP     127.0.0.1:" in out and "identity" in out, out
    http_port = int(out.split("HTTP     127.0.0.1:")[1].split()[0])
    cmdlines = subprocess.run(["ps", "-ww", "-e", "-o", "pid=,args="], capture_output=True, text=True).stdout
    server_pids = [int(line.split()[0]) for line in cmdlines.splitlines() if f"--http-port={http_port}" in line]
    assert len(server_pids) == 1
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert _wait_gone(server_pids[0], 10) == []


def test_missing_repository_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        launch_local(LocalLaunch(tmp_path / "nope"))


def test_missing_binary_is_a_clear_error(tmp_path):
    with pytest.raises(BinaryNotFoundError, match="no executable file"):
        launch_local(LocalLaunch(copy_models(tmp_path, ["identity"]), tritonserver=tmp_path / "tritonserver"))


def test_port_in_use_is_refused_before_launch(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(PortInUseError, match=f"HTTP port {port}"):
            launch_local(LocalLaunch(copy_models(tmp_path, ["identity"]), http_port=port))


@pytest.mark.usefixtures("tritonserver")
def test_server_dying_during_startup_shows_its_log_tail(tmp_path):
    repo = copy_models(tmp_path, ["identity"])
    broken = repo / "broken"
    (broken / "1").mkdir(parents=True)
    (broken / "config.pbtxt").write_text('name: "broken"\nbackend: "python"\nmax_batch_size: 0\n')
    (broken / "1" / "model.py").write_text(
        "class TritonPythonModel:\n    def initialize(self, args):\n        raise RuntimeError('planted failure')\n"
    )
    with pytest.raises(ServerStartError) as info:
        launch_local(LocalLaunch(repo, startup_timeout_s=60))
    assert "planted failure" in info.value.log_tail


@pytest.mark.usefixtures("tritonserver")
@pytest.mark.parametrize("which", [0, 1], ids=["http", "grpc"])
def test_a_free_port_taken_before_tritonserver_binds_it_is_tried_again_on_others(tmp_path, monkeypatch, which):
    # Another process takes a port between its choice and tritonserver's bind (tritonserver binds
    # after loading its models): each endpoint's own message says so, and the launch picks others.
    import socket

    from perfkit.server import local

    picked: list[list[int]] = []
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()

        def racing_free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
            ports = free_ports(count, host)
            if not picked:
                ports[which] = taken.getsockname()[1]
            picked.append(ports)
            return ports

        monkeypatch.setattr(local, "free_ports", racing_free_ports)
        with launch_local(LocalLaunch(copy_models(tmp_path, ["identity"]), models=("identity",))) as server:
            assert server.is_ready()
            assert len(picked) == 2 and taken.getsockname()[1] not in picked[1]
            assert [server.endpoints.http_port, server.endpoints.grpc_port] == picked[1][:2]


def test_free_ports_are_distinct():
    ports = free_ports(3)
    assert len(set(ports)) == 3 and all(1024 < p < 65536 for p in ports)


@pytest.mark.usefixtures("tritonserver")
def test_user_environment_reaches_the_server(tmp_path):
    repo = copy_models(tmp_path, ["identity"])
    with launch_local(LocalLaunch(repo, env={"PERFKIT_TEST_MARK": "42"})) as server:
        env = Path(f"/proc/{server.pid}/environ").read_bytes().split(b"\0")
        assert b"PERFKIT_TEST_MARK=42" in env
        assert b"OPENBLAS_NUM_THREADS=1" in env
        assert os.environ.get("PERFKIT_TEST_MARK") is None


@pytest.mark.usefixtures("tritonserver")
def test_a_server_without_explicit_model_control_is_named_as_the_problem(tmp_path):
    """A user's own server started with --model-control-mode=none: loading (the tuner, gate --ab)
    must say what to change on the server, not that the model's config is broken."""
    repo = copy_models(tmp_path, ["identity"])
    with launch_local(LocalLaunch(repo, models=(), extra_args=("--model-control-mode=none",))) as server:
        assert server.is_ready()
        with pytest.raises(ServerError, match="does not let clients load models") as info:
            server.load_model("identity")
        assert not isinstance(info.value, ModelLoadError)
        assert "--model-control-mode=explicit" in (info.value.hint or "")
        with pytest.raises(ServerError, match="does not let clients load models") as info:
            server.unload_model("identity")
        assert not isinstance(info.value, ModelLoadError)


@pytest.mark.usefixtures("tritonserver")
def test_shared_memory_asked_for_launches_the_bundled_server_without_the_consent_flag_and_serves_it(tmp_path):
    """The bundled Triton (2.51.0) predates --allow-client-shm (2.69.0 / 26.05) and would refuse it
    as an unknown option, so a launch that asks for client shared memory reads the binary's --help,
    leaves the flag out, starts, and serves a --shared-memory system profile. (A newer server given
    the flag is checked on the command lines: tests/unit/server/test_client_shm.py.)"""
    from perfkit.measure import profile
    from perfkit.records import LoadLevel, ProfileSpec

    repo = copy_models(tmp_path, ["identity"])
    with launch_local(LocalLaunch(repo, models=("identity",), client_shm=True)) as server:
        cmdline = Path(f"/proc/{server.pid}/cmdline").read_bytes().split(b"\0")
        assert not [a for a in cmdline if a.startswith(b"--allow-client-shm")]
        assert server.version() == "2.51.0"
        spec = ProfileSpec(
            model="identity", levels=(LoadLevel("concurrency", 1),), shared_memory="system",
            measurement_interval_ms=300.0, max_trials=3, min_windows=3, warmup_s=0.2,
        )  # fmt: skip
        rec = profile(server, spec)
        assert rec.levels[0].error_count == 0 and rec.levels[0].service.count > 0
        status, regions = server._request("GET", "/v2/systemsharedmemory/status")
        assert status == 200 and not [r for r in regions if "perfkit" in r.get("name", "")]

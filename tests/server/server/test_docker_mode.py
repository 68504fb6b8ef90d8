"""Docker launch mode against a real Docker engine: Debian's dockerd started by the harness, and a
Triton image built on this machine from the nvidia-pytriton wheel (tests/support/docker_engine.py).

Every test checks with the engine's own container list that perfkit left no container behind,
whether the run ended normally, with an error, on Ctrl-C, or at interpreter exit. The fake engine
(tests/support/fake_docker_engine.py) is left for pulling and for a daemon vanishing mid-start.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from typing import Any

import docker.errors
import numpy as np
import pytest
import tritonclient.http as httpclient

from perfkit.errors import InputError, ServerError, ServerStartError, UsageError
from perfkit.records import RunRecord, TuneRecord, from_dict
from perfkit.server.docker import DockerServer, launch_docker
from perfkit.server.launch import ServerOptions, open_server
from tests.conftest import CHEAP_CONFIRM, ROOT, Lines, copy_models
from tests.support.docker_engine import DockerDaemon

pytestmark = [pytest.mark.usefixtures("tritonserver")]

COMMAND = [
    "tritonserver",
    "--model-repository=/models",
    "--model-control-mode=explicit",
    "--http-port=8000",
    "--grpc-port=8001",
    "--metrics-port=8002",
    "--strict-readiness=true",
]


def _no_container_left(daemon: DockerDaemon) -> None:
    left = [(c.name, c.status) for c in daemon.containers()]
    assert left == [], f"containers left behind: {left}"


def _infer_identity(url: str) -> None:
    client = httpclient.InferenceServerClient(url)
    x = np.arange(32, dtype=np.float32).reshape(2, 16)
    inp = httpclient.InferInput("INPUT0", [2, 16], "FP32")
    inp.set_data_from_numpy(x)
    np.testing.assert_array_equal(client.infer("identity", [inp]).as_numpy("OUTPUT0"), x)


def _perfkit(*args: str, daemon: DockerDaemon, image: str) -> list[str]:
    return [sys.executable, "-m", "perfkit", *args, "--launch-mode", "docker", "--image", image,
            "--docker-url", daemon.url]  # fmt: skip


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1"}


def test_run_infer_and_remove_even_when_the_block_raises(tmp_path, docker_daemon, triton_image):
    repo = copy_models(tmp_path, ["identity"])
    log = tmp_path / "logs" / "triton.log"
    opts = ServerOptions(
        mode="docker",
        model_repository=tmp_path / ".." / tmp_path.name / "models",  # perfkit must send an absolute, clean path
        image=triton_image,
        shm_size="256m",
        docker_url=docker_daemon.url,
        env={"PERFKIT_TEST": "yes"},
        log_path=log,
    )
    with pytest.raises(RuntimeError, match="inside the block"):
        with open_server(opts) as server:
            assert isinstance(server, DockerServer) and server.mode == "docker"
            cid = server.container_id
            attrs: dict[str, Any] = docker_daemon.client.containers.get(cid).attrs
            assert attrs["State"]["Running"] and server.alive()
            assert re.fullmatch(r"/perfkit-triton-[0-9a-f]{8}", attrs["Name"])
            config, host_cfg = attrs["Config"], attrs["HostConfig"]
            assert config["Image"] == triton_image and config["Labels"] == {"perfkit": "1"}
            assert config["Cmd"] == [*COMMAND, "--load-model=*"]
            assert {"PERFKIT_TEST=yes", "OPENBLAS_NUM_THREADS=1"} <= set(config["Env"])
            assert host_cfg["Binds"] == [f"{repo.resolve()}:/models:ro"]
            assert host_cfg["ShmSize"] == 256 * 1024 * 1024 and not host_cfg.get("DeviceRequests")
            # the engine publishes the three ports on loopback only, where perfkit says they are
            ep = server.endpoints
            published = attrs["NetworkSettings"]["Ports"]
            assert {k: [(b["HostIp"], int(b["HostPort"])) for b in v] for k, v in published.items()} == {
                "8000/tcp": [("127.0.0.1", ep.http_port)],
                "8001/tcp": [("127.0.0.1", ep.grpc_port)],
                "8002/tcp": [("127.0.0.1", ep.metrics_port)],
            }
            _infer_identity(ep.http_url)
            assert "identity" in server.log_tail(200)
            raise RuntimeError("inside the block")
    _no_container_left(docker_daemon)
    with pytest.raises(docker.errors.NotFound):
        docker_daemon.client.containers.get(cid)
    assert server.status() == "removed" and not server.alive()
    assert "Started HTTPService" in log.read_text()  # the container's log, saved before it was removed
    server.stop()  # idempotent


def test_gpus_on_an_engine_without_the_nvidia_runtime_is_a_start_error(tmp_path, docker_daemon, triton_image):
    repo = copy_models(tmp_path, ["identity"])
    opts = ServerOptions(
        mode="docker", model_repository=repo, image=triton_image, gpus="0,1", docker_url=docker_daemon.url
    )
    with pytest.raises(ServerStartError) as info:
        launch_docker(opts)
    assert "device driver" in info.value.message and "NVIDIA Container Toolkit" in (info.value.hint or "")
    assert re.match(r"container perfkit-triton-[0-9a-f]{8} from \S+ failed to start", info.value.message)
    _no_container_left(docker_daemon)  # the half-made container was removed


def test_a_start_timeout_removes_the_container(tmp_path, docker_daemon, triton_image):
    repo = copy_models(tmp_path, ["identity"])
    opts = ServerOptions(
        mode="docker", model_repository=repo, image=triton_image, docker_url=docker_daemon.url, startup_timeout_s=0.2
    )
    with pytest.raises(ServerStartError, match="not ready after"):
        launch_docker(opts)
    _no_container_left(docker_daemon)


def test_unreachable_engine_is_a_one_line_server_error(tmp_path):
    repo = copy_models(tmp_path, ["identity"])
    url = f"unix://{tmp_path}/no-such-dir/docker.sock"
    with pytest.raises(ServerError) as info:
        launch_docker(ServerOptions(mode="docker", model_repository=repo, docker_url=url))
    line = info.value.one_line()
    assert line.startswith(f"cannot reach the Docker engine at {url}: No such file or directory")
    assert "\n" not in str(info.value) and "--launch-mode local" in line


def test_an_image_that_cannot_be_pulled_is_a_server_error_naming_it(tmp_path, docker_daemon):
    repo = copy_models(tmp_path, ["identity"])
    image = "127.0.0.1:1/perfkit-no-such-image:1"  # a registry on loopback where nothing listens
    with pytest.raises(ServerError) as info:
        launch_docker(ServerOptions(mode="docker", model_repository=repo, image=image, docker_url=docker_daemon.url))
    assert not isinstance(info.value, ServerStartError)
    assert info.value.message.startswith(f"cannot pull image {image}: ")
    assert "docker login" in (info.value.hint or "")
    _no_container_left(docker_daemon)


def test_bad_options_fail_before_the_engine_is_asked(tmp_path):
    repo = copy_models(tmp_path, ["identity"])
    # an engine that is not there: asking it would be a ServerError, not these
    base = ServerOptions(mode="docker", model_repository=repo, docker_url=f"unix://{tmp_path}/none.sock")
    with pytest.raises(UsageError, match="--gpus 'first'"):
        launch_docker(ServerOptions(**{**base.__dict__, "gpus": "first"}))
    with pytest.raises(InputError, match="--shm-size 'lots'"):
        launch_docker(ServerOptions(**{**base.__dict__, "shm_size": "lots"}))
    with pytest.raises(InputError, match="'nope' is not in the model repository"):
        launch_docker(ServerOptions(**{**base.__dict__, "models": ("nope",)}))


def test_container_exiting_during_startup_carries_the_log_tail(tmp_path, docker_daemon, triton_image):
    repo = copy_models(tmp_path, ["identity"])
    cfg = repo / "identity" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace('backend: "python"', 'backend: "no_such_backend"'))
    log = tmp_path / "failed.log"
    opts = ServerOptions(
        mode="docker", model_repository=repo, image=triton_image, docker_url=docker_daemon.url, log_path=log
    )
    with pytest.raises(ServerStartError) as info:
        launch_docker(opts)
    err = info.value
    assert re.fullmatch(r"container perfkit-triton-[0-9a-f]{8} \(\S+\) exited with code 1 during start-up", err.message)
    assert "no_such_backend" in err.log_tail
    assert str(log) in (err.hint or "") and "no_such_backend" in log.read_text()
    _no_container_left(docker_daemon)


def test_cli_serve_in_docker_mode_until_ctrl_c(tmp_path, docker_daemon, triton_image):
    repo = copy_models(tmp_path, ["identity"])
    args = _perfkit("serve", "--model-repository", str(repo), "--model", "identity", "--shm-size", "64m",
                    daemon=docker_daemon, image=triton_image)  # fmt: skip
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env())
    assert proc.stdout is not None
    out = Lines(proc.stdout)
    try:
        host, port = out.wait_for(r"HTTP\s+(\S+):(\d+)$").groups()
        out.wait_for("Press Ctrl-C")
        assert "ready (docker)" in out.text()
        (container,) = docker_daemon.containers()
        attrs = container.attrs
        assert attrs["Config"]["Cmd"][-1] == "--load-model=identity"
        assert attrs["HostConfig"]["ShmSize"] == 64 * 1024**2
        assert attrs["NetworkSettings"]["Ports"]["8000/tcp"] == [{"HostIp": host, "HostPort": port}]
        assert host == "127.0.0.1"
        _infer_identity(f"{host}:{port}")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130, out.join()
    finally:
        if proc.poll() is None:
            proc.kill()
    _no_container_left(docker_daemon)


def test_container_left_running_is_removed_at_interpreter_exit(tmp_path, docker_daemon, triton_image):
    repo = copy_models(tmp_path, ["identity"])
    script = (
        "from pathlib import Path\n"
        "from perfkit.server.launch import ServerOptions, open_server\n"
        f"server = open_server(ServerOptions(mode='docker', image={triton_image!r}, "
        f"model_repository=Path({str(repo)!r})))\n"
        "print(server.container_id, flush=True)\n"  # no stop(): atexit must do it
    )
    # docker_url left out: the SDK's from_env() reads DOCKER_HOST
    env = {**os.environ, "DOCKER_HOST": docker_daemon.url}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"[0-9a-f]{64}", done.stdout.strip())
    _no_container_left(docker_daemon)


def test_cli_profile_in_a_container_measures_and_removes_it(tmp_path, docker_daemon, triton_image):
    repo = copy_models(tmp_path, ["identity"])
    rec_path = tmp_path / "run.json"
    args = _perfkit("profile", "-m", "identity", "--model-repository", str(repo), "--concurrency-range", "1:2",
                    "-p", "300", "-r", "6", "-o", str(rec_path), daemon=docker_daemon, image=triton_image)  # fmt: skip
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, env=_env(), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    rec = from_dict(RunRecord, json.loads(rec_path.read_text()))
    assert rec.status == "ok" and rec.server.mode == "docker"
    assert [lv.load.value for lv in rec.levels] == [1, 2]
    assert all(lv.throughput_infer_per_s > 0 and lv.request_count > 0 and lv.error_count == 0 for lv in rec.levels)
    # the server-side statistics came from the container's Triton and count what was sent
    assert all(lv.server is not None and lv.server.request_count >= lv.request_count for lv in rec.levels)
    _no_container_left(docker_daemon)


def test_cli_profile_error_after_the_start_removes_the_container(tmp_path, docker_daemon, triton_image):
    repo = copy_models(tmp_path, ["identity"])
    bad = tmp_path / "bad.json"
    bad.write_text('{"data": [{"WRONG": [1.0, 2.0]}]}')  # checked against the served model's metadata
    args = _perfkit("profile", "-m", "identity", "--model-repository", str(repo), "--input-data", str(bad),
                    "--concurrency-range", "1", "-p", "300", daemon=docker_daemon, image=triton_image)  # fmt: skip
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, env=_env(), timeout=300)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "names ['WRONG'], which model 'identity' does not have" in done.stderr
    _no_container_left(docker_daemon)


@pytest.mark.slow
def test_cli_tune_in_a_container_restores_the_config_and_removes_it(tmp_path, docker_daemon, triton_image):
    repo = copy_models(tmp_path, ["batcher"])
    cfg = repo / "batcher" / "config.pbtxt"
    original = cfg.read_bytes()
    out = tmp_path / "out"
    args = _perfkit("tune", "-m", "batcher", "--model-repository", str(repo), "-o", str(out), "--trials", "2",
                    "--seed", "1", "--latency-budget", "500ms", "--load", "concurrency", "--max-concurrency", "2",
                    "--measurement-interval", "300", "--max-batch-sizes", "8", "--no-dynamic-batching",
                    "--instance-counts", "1,2", "--precisions", "fp32", "--search", "measure", *CHEAP_CONFIRM,
                    daemon=docker_daemon, image=triton_image)  # fmt: skip
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, env=_env(), timeout=420)
    assert done.returncode == 0, done.stdout + done.stderr
    assert cfg.read_bytes() == original
    rec = from_dict(TuneRecord, json.loads((out / "tune.json").read_text()))
    assert rec.status == "ok" and rec.original_config == original.decode()
    complete = [t for t in rec.trials if t.state == "complete"]
    assert len(complete) >= 2 and all((t.throughput_infer_per_s or 0) > 0 for t in complete)
    # each candidate was served by the container: the instance counts measured differ
    assert {t.params.get("instance_count") for t in complete} == {1, 2}
    _no_container_left(docker_daemon)


def test_cli_profile_interrupted_by_ctrl_c_removes_the_container(tmp_path, docker_daemon, triton_image):
    repo = copy_models(tmp_path, ["identity"])
    rec_path = tmp_path / "interrupted.json"
    args = _perfkit("profile", "-m", "identity", "--model-repository", str(repo), "--concurrency-range", "1:3",
                    "-p", "300", "-r", "20", "--min-windows", "20", "-o", str(rec_path),
                    daemon=docker_daemon, image=triton_image)  # fmt: skip
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env())
    assert proc.stdout is not None
    out = Lines(proc.stdout)
    try:
        out.wait_for(r"measuring concurrency 2")  # level 1 is done, in the container
        assert len(docker_daemon.containers()) == 1
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130, out.join()
    finally:
        if proc.poll() is None:
            proc.kill()
    rec = RunRecord.load(rec_path)
    assert rec.status == "interrupted" and [lv.load.value for lv in rec.levels] == [1]
    _no_container_left(docker_daemon)


@pytest.mark.slow
def test_cli_tune_stopped_by_sigterm_mid_trial_restores_the_config_and_removes_it(
    tmp_path, docker_daemon, triton_image
):
    repo = copy_models(tmp_path, ["batcher"])
    cfg = repo / "batcher" / "config.pbtxt"
    original = cfg.read_bytes()
    args = _perfkit("tune", "-m", "batcher", "--model-repository", str(repo), "-o", str(tmp_path / "out"),
                    "--trials", "3", "--latency-budget", "500ms", "--load", "concurrency", "--max-concurrency", "4",
                    "--measurement-interval", "300", "--max-batch-sizes", "8", "--no-dynamic-batching",
                    "--instance-counts", "1,2", "--precisions", "fp32", "--search", "measure", daemon=docker_daemon,
                    image=triton_image)  # fmt: skip
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env())
    assert proc.stdout is not None
    out = Lines(proc.stdout)
    try:
        out.wait_for(r"^trial 1/")  # a candidate is being applied or measured in the container
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 130, out.join()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert cfg.read_bytes() == original
    _no_container_left(docker_daemon)

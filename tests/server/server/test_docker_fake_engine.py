"""Docker launch mode against the fake engine, for the two things a real engine cannot be made to do
in a test (tests/support/fake_docker_engine.py says why): pull an absent image, and vanish mid-start.
Everything else runs against a real dockerd in tests/server/server/test_docker_mode.py."""

from __future__ import annotations

import re
import threading
import time

import numpy as np
import pytest
import tritonclient.http as httpclient

from perfkit.errors import ServerError
from perfkit.server import docker as docker_target
from perfkit.server.docker import DockerServer, launch_docker
from perfkit.server.launch import ServerOptions, open_server
from tests.conftest import copy_models
from tests.support.fake_docker_engine import IMAGE, assert_removed, make_engine  # noqa: F401  (make_engine: a fixture)


@pytest.mark.usefixtures("tritonserver")
def test_an_absent_image_is_pulled_run_and_removed_even_when_the_block_raises(tmp_path, make_engine):  # noqa: F811
    engine = make_engine(images=set(), pullable={IMAGE})
    repo = copy_models(tmp_path, ["identity"])
    log = tmp_path / "logs" / "triton.log"
    opts = ServerOptions(
        mode="docker",
        model_repository=tmp_path / ".." / tmp_path.name / "models",  # perfkit must send an absolute, clean path
        image=IMAGE,
        gpus="all",
        shm_size="256m",
        docker_url=engine.url,
        env={"PERFKIT_TEST": "yes"},
        log_path=log,
    )
    with pytest.raises(RuntimeError, match="inside the block"):
        with open_server(opts) as server:
            assert isinstance(server, DockerServer) and server.mode == "docker"
            cid = server.container_id
            client = httpclient.InferenceServerClient(server.endpoints.http_url)
            x = np.arange(32, dtype=np.float32).reshape(2, 16)
            inp = httpclient.InferInput("INPUT0", [2, 16], "FP32")
            inp.set_data_from_numpy(x)
            np.testing.assert_array_equal(client.infer("identity", [inp]).as_numpy("OUTPUT0"), x)
            assert server.alive()
            assert "identity" in server.log_tail(200)
            raise RuntimeError("inside the block")

    # pulled because absent, by repository and tag
    assert engine.calls("GET", f"/images/{IMAGE}/json")
    (pull,) = engine.calls("POST", "/images/create")
    assert pull.query == {"fromImage": "nvcr.io/nvidia/tritonserver", "tag": "24.10-py3"}
    (create,) = engine.calls("POST", "/containers/create")
    assert re.fullmatch(r"perfkit-triton-[0-9a-f]{8}", create.query["name"])
    body = create.body
    assert body["Image"] == IMAGE
    assert body["Labels"] == {"perfkit": "1"}
    assert body["Cmd"] == [
        "tritonserver",
        "--model-repository=/models",
        "--model-control-mode=explicit",
        "--http-port=8000",
        "--grpc-port=8001",
        "--metrics-port=8002",
        "--strict-readiness=true",
        "--load-model=*",
    ]
    assert "PERFKIT_TEST=yes" in body["Env"]
    host_cfg = body["HostConfig"]
    assert host_cfg["Binds"] == [f"{repo.resolve()}:/models:ro"]
    assert host_cfg["ShmSize"] == 256 * 1024 * 1024
    (gpu,) = host_cfg["DeviceRequests"]
    assert gpu["Count"] == -1 and gpu["Capabilities"] == [["gpu"]] and not gpu.get("DeviceIDs")
    ep = server.endpoints
    assert host_cfg["PortBindings"] == {
        "8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(ep.http_port)}],
        "8001/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(ep.grpc_port)}],
        "8002/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(ep.metrics_port)}],
    }
    assert set(body["ExposedPorts"]) == {"8000/tcp", "8001/tcp", "8002/tcp"}
    # stopped (10 s grace), removed, the real server gone, and its log kept
    assert_removed(engine, cid)
    fake = engine.removed[cid]
    assert fake.server is not None and not fake.server.alive()
    assert not server.alive()
    assert "Started HTTPService" in log.read_text()
    server.stop()  # idempotent: no second stop/delete
    assert_removed(engine, cid)


def test_engine_lost_during_startup_is_a_server_error_naming_the_leftover(tmp_path, make_engine, caplog):  # noqa: F811
    engine = make_engine(launch=False)
    repo = copy_models(tmp_path, ["identity"])
    opts = ServerOptions(mode="docker", model_repository=repo, docker_url=engine.url, startup_timeout_s=30)

    def cut_engine() -> None:
        deadline = time.monotonic() + 20
        while not engine.calls("POST", r"/containers/[0-9a-f]+/start") and time.monotonic() < deadline:
            time.sleep(0.02)
        engine.kill()

    cutter = threading.Thread(target=cut_engine)
    cutter.start()
    try:
        with pytest.raises(ServerError) as info:
            launch_docker(opts)
    finally:
        cutter.join()
    assert info.value.message.startswith("lost contact with the Docker engine about container perfkit-triton-")
    assert "docker rm -f perfkit-triton-" in caplog.text  # the leftover is named, not silently leaked
    leftover = [k for k, srv in docker_target._LIVE.items() if f"docker rm -f {srv.container_name}" in caplog.text]
    assert len(leftover) == 1  # still registered for another try at exit
    docker_target._LIVE.pop(leftover[0])  # forget it so this test process exits quietly


@pytest.mark.usefixtures("tritonserver")
def test_shared_memory_asked_for_gives_a_2605_image_the_consent_flag_and_a_2410_one_none(tmp_path, make_engine):  # noqa: F811
    """No 26.05 image can be had here (no registry; only a 2.51 server runs), so the fake engine
    pulls one by name: its container's command carries --allow-client-shm=true (the image's tag says
    it is 26.05 or later), while the default 24.10 image's does not (it would refuse the option)."""
    new_image = "nvcr.io/nvidia/tritonserver:26.05-py3"
    repo = copy_models(tmp_path, ["identity"])
    for image, flagged in ((new_image, True), (IMAGE, False)):
        engine = make_engine(images=set(), pullable={new_image, IMAGE})
        opts = ServerOptions(
            mode="docker", model_repository=repo, models=("identity",), image=image, docker_url=engine.url,
            client_shm=True, startup_timeout_s=90,
        )  # fmt: skip
        with open_server(opts) as server:
            assert server.is_ready()
        cmd = engine.create_body()["Cmd"]
        assert ("--allow-client-shm=true" in cmd) is flagged, (image, cmd)

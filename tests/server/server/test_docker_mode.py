"""Docker launch mode against a fake Docker Engine that runs a real tritonserver as its "container".

The fake speaks the Docker Engine API calls the docker SDK makes (on a unix socket), records
every request, and when asked to start a container launches the bundled tritonserver through
launch_local with the bind-mount source as repository and the published host ports, so
readiness and inference go to a real server.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socketserver
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from perfkit.errors import InputError, ServerError, ServerStartError, UsageError
from perfkit.server import LocalLaunch, launch_local
from perfkit.server import docker as docker_target
from perfkit.server.docker import DockerServer, launch_docker
from perfkit.server.launch import ServerOptions, open_server
from perfkit.server.local import LocalServer
from tests.conftest import ROOT, copy_models

IMAGE = "nvcr.io/nvidia/tritonserver:24.10-py3"


@dataclass
class Request:
    method: str
    path: str  # without the /vX.Y prefix
    query: dict[str, str]
    body: Any


@dataclass
class FakeContainer:
    id: str
    name: str
    spec: dict[str, Any]
    log_path: Path
    status: str = "created"
    exit_code: int = 0
    server: LocalServer | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    error: ServerError | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class FakeEngine:
    """A Docker Engine stand-in; `launch=True` makes started containers real tritonservers."""

    def __init__(
        self, sock_path: Path, *, images: set[str], pullable: set[str], gpu_runtime: bool = True, launch: bool = True
    ) -> None:
        self.sock_path = sock_path
        self.images = set(images)
        self.pullable = set(pullable)
        self.gpu_runtime = gpu_runtime
        self.launch = launch
        self.dead = False
        self.requests: list[Request] = []
        self.unhandled: list[Request] = []
        self.containers: dict[str, FakeContainer] = {}
        self.removed: dict[str, FakeContainer] = {}
        self.logdir = Path(tempfile.mkdtemp(prefix="fake-docker-logs-"))
        self.lock = threading.Lock()
        engine = self

        class Handler(_Handler):
            pass

        Handler.engine = engine
        self._server = _UnixHTTPServer(str(sock_path), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"unix://{self.sock_path}"

    def calls(self, method: str, pattern: str) -> list[Request]:
        return [r for r in self.requests if r.method == method and re.fullmatch(pattern, r.path)]

    def create_body(self) -> dict[str, Any]:
        (create,) = self.calls("POST", "/containers/create")
        return dict(create.body)

    def kill(self) -> None:
        """Vanish like a stopped daemon: close the socket and drop kept-alive connections."""
        self.dead = True
        self._server.shutdown()
        self._server.server_close()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        for c in list(self.containers.values()):
            self._stop(c)
        shutil.rmtree(self.logdir, ignore_errors=True)

    # -- container behaviour ---------------------------------------------------------------
    def _find(self, ref: str) -> FakeContainer | None:
        for c in self.containers.values():
            if ref in (c.id, c.name) or (len(ref) >= 12 and c.id.startswith(ref)):
                return c
        return None

    def _refresh(self, c: FakeContainer) -> None:
        with c.lock:
            if c.status == "running" and c.server is not None and not c.server.alive():
                c.status, c.exit_code = "exited", 1

    def _run(self, c: FakeContainer) -> None:
        host_cfg = c.spec["HostConfig"]
        (bind,) = host_cfg["Binds"]
        source, target, mode = bind.split(":")
        assert (target, mode) == ("/models", "ro")
        cmd = c.spec["Cmd"]
        loads = tuple(a.split("=", 1)[1] for a in cmd if a.startswith("--load-model="))
        ports = {k: int(v[0]["HostPort"]) for k, v in host_cfg["PortBindings"].items()}
        (host,) = {v[0]["HostIp"] for v in host_cfg["PortBindings"].values()}
        env = dict(item.split("=", 1) for item in c.spec.get("Env") or [])
        try:
            server = launch_local(
                LocalLaunch(
                    Path(source),
                    models=None if loads == ("*",) else loads,
                    host=host,
                    http_port=ports["8000/tcp"],
                    grpc_port=ports["8001/tcp"],
                    metrics_port=ports["8002/tcp"],
                    env=env,
                    log_path=c.log_path,
                    startup_timeout_s=90,
                )
            )
        except ServerError as err:
            with c.lock:
                c.status, c.exit_code, c.error = "exited", 1, err
            return
        with c.lock:
            c.server = server
        # This thread forked tritonserver, whose parent-death signal fires when this *thread* ends:
        # it lives as long as the "container" and stops the server itself.
        c.stop.wait()
        server.stop()

    def _start(self, c: FakeContainer) -> tuple[int, Any]:
        if c.spec["HostConfig"].get("DeviceRequests") and not self.gpu_runtime:
            return 500, {"message": 'could not select device driver "" with capabilities: [[gpu]]'}
        c.status = "running"
        if self.launch:
            c.thread = threading.Thread(target=self._run, args=(c,), daemon=True)
            c.thread.start()
        else:
            c.log_path.write_text("fake container without a server\n")
        return 204, None

    def _stop(self, c: FakeContainer) -> int:
        self._refresh(c)
        if c.status != "running":
            return 304
        c.stop.set()
        if c.thread is not None:
            c.thread.join(timeout=120)
        with c.lock:
            c.status, c.exit_code = "exited", 143
        return 204

    def _inspect(self, c: FakeContainer) -> dict[str, Any]:
        self._refresh(c)
        return {
            "Id": c.id,
            "Name": "/" + c.name,
            "State": {"Status": c.status, "Running": c.status == "running", "ExitCode": c.exit_code},
            "Config": {"Tty": False, "Image": c.spec["Image"], "Cmd": c.spec["Cmd"], "Labels": c.spec.get("Labels")},
            "HostConfig": c.spec["HostConfig"],
        }

    def _logs(self, c: FakeContainer, query: dict[str, str]) -> bytes:
        try:
            lines = c.log_path.read_bytes().splitlines(keepends=True)
        except OSError:
            lines = []
        tail = query.get("tail", "all")
        if tail != "all":
            lines = lines[-int(tail) :] if int(tail) > 0 else []
        # Non-TTY containers answer in Docker's multiplexed stream format: 8-byte header per frame.
        return b"".join(struct.pack(">BxxxL", 1, len(line)) + line for line in lines)

    # -- routing -----------------------------------------------------------------------------
    def handle(self, req: Request) -> tuple[int, Any]:
        p = req.path
        if req.method in ("GET", "HEAD") and p in ("/_ping", "/version"):
            if p == "/_ping":
                return 200, b"OK"
            return 200, {"ApiVersion": "1.45", "MinAPIVersion": "1.24", "Version": "26.1.0", "Os": "linux"}
        m = re.fullmatch(r"/images/(.+)/json", p)
        if req.method == "GET" and m:
            name = urllib.parse.unquote(m.group(1))
            if name in self.images:
                return 200, {"Id": "sha256:" + "0" * 64, "RepoTags": [name]}
            return 404, {"message": f"No such image: {name}"}
        if req.method == "POST" and p == "/images/create":
            ref = f"{req.query.get('fromImage')}:{req.query.get('tag', 'latest')}"
            if ref not in self.pullable:
                return 404, {"message": f"pull access denied for {req.query.get('fromImage')}, repository does "
                             "not exist or may require 'docker login'"}  # fmt: skip
            self.images.add(ref)
            return 200, {"status": f"Status: Downloaded newer image for {ref}"}
        if req.method == "POST" and p == "/containers/create":
            if req.body["Image"] not in self.images:
                return 404, {"message": f"No such image: {req.body['Image']}"}
            cid = secrets.token_hex(32)
            name = req.query.get("name") or cid[:12]
            self.containers[cid] = FakeContainer(cid, name, req.body, self.logdir / f"{cid}.log")
            return 201, {"Id": cid, "Warnings": []}
        m = re.fullmatch(r"/containers/([^/]+)(/[a-z]+)?", p)
        if m:
            c = self._find(m.group(1))
            if c is None:
                return 404, {"message": f"No such container: {m.group(1)}"}
            action = m.group(2)
            if req.method == "GET" and action == "/json":
                return 200, self._inspect(c)
            if req.method == "POST" and action == "/start":
                return self._start(c)
            if req.method == "POST" and action == "/stop":
                return self._stop(c), None
            if req.method == "GET" and action == "/logs":
                return 200, self._logs(c, req.query)
            if req.method == "DELETE" and action is None:
                self._refresh(c)
                if c.status == "running":
                    if req.query.get("force") not in ("1", "True", "true"):
                        return 409, {"message": "cannot remove a running container"}
                    self._stop(c)
                self.removed[c.id] = self.containers.pop(c.id)
                return 204, None
        self.unhandled.append(req)
        return 404, {"message": f"fake engine: no route for {req.method} {p}"}


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    engine: FakeEngine

    def _serve(self) -> None:
        if self.engine.dead:
            self.close_connection = True
            return
        url = urllib.parse.urlsplit(self.path)
        path = re.sub(r"^/v\d+\.\d+", "", url.path)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.loads(raw) if raw else None
        req = Request(self.command, path, query, body)
        with self.engine.lock:
            self.engine.requests.append(req)
        status, payload = self.engine.handle(req)
        data = payload if isinstance(payload, bytes) else b"" if payload is None else json.dumps(payload).encode()
        self.send_response(status)
        ctype = "application/vnd.docker.multiplexed-stream" if path.endswith("/logs") else "application/json"
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_POST = do_DELETE = do_HEAD = _serve

    def log_message(self, format: str, *args: Any) -> None:  # client_address is '' on a unix socket
        pass


@pytest.fixture
def make_engine() -> Iterator[Any]:
    engines: list[FakeEngine] = []
    sockdir = Path(tempfile.mkdtemp(prefix="pk-docker-"))  # short: unix socket paths max out at 107 bytes

    def make(**kwargs: Any) -> FakeEngine:
        kwargs.setdefault("images", {IMAGE})
        kwargs.setdefault("pullable", set())
        engine = FakeEngine(sockdir / f"e{len(engines)}.sock", **kwargs)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.close()
        assert not engine.unhandled, f"the SDK made calls the fake does not know: {engine.unhandled}"
    shutil.rmtree(sockdir, ignore_errors=True)


def _assert_removed(engine: FakeEngine, cid: str) -> None:
    assert cid not in engine.containers and cid in engine.removed
    (stop,) = engine.calls("POST", f"/containers/{cid}/stop")
    assert stop.query["t"] == "10"
    (delete,) = engine.calls("DELETE", f"/containers/{cid}")
    assert delete.query["force"] in ("1", "True", "true")


@pytest.mark.usefixtures("tritonserver")
def test_pull_run_infer_and_remove_even_when_the_block_raises(tmp_path, make_engine):
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
    _assert_removed(engine, cid)
    fake = engine.removed[cid]
    assert fake.server is not None and not fake.server.alive()
    assert not server.alive()
    assert "Started HTTPService" in log.read_text()
    server.stop()  # idempotent: no second stop/delete
    _assert_removed(engine, cid)


def test_gpu_ids_reach_the_engine_and_a_missing_nvidia_runtime_is_a_start_error(tmp_path, make_engine):
    engine = make_engine(gpu_runtime=False, launch=False)
    repo = copy_models(tmp_path, ["identity"])
    opts = ServerOptions(mode="docker", model_repository=repo, gpus="0,1", docker_url=engine.url, models=("identity",))
    with pytest.raises(ServerStartError) as info:
        launch_docker(opts)
    assert "device driver" in info.value.message and "NVIDIA Container Toolkit" in (info.value.hint or "")
    assert not engine.calls("POST", "/images/create")  # the engine had the image
    body = engine.create_body()
    (gpu,) = body["HostConfig"]["DeviceRequests"]
    assert gpu["DeviceIDs"] == ["0", "1"] and gpu["Capabilities"] == [["gpu"]]
    assert body["Cmd"][-1] == "--load-model=identity"
    assert body["HostConfig"]["ShmSize"] == 1024**3  # default 1g
    assert not engine.containers  # the half-made container was removed


def test_no_gpus_means_no_device_request_and_a_timeout_removes_the_container(tmp_path, make_engine):
    engine = make_engine(launch=False)  # "running" but nothing listens: never ready
    repo = copy_models(tmp_path, ["identity"])
    opts = ServerOptions(mode="docker", model_repository=repo, docker_url=engine.url, startup_timeout_s=0.5)
    with pytest.raises(ServerStartError, match="not ready after"):
        launch_docker(opts)
    assert not engine.create_body()["HostConfig"].get("DeviceRequests")
    (cid,) = engine.removed
    _assert_removed(engine, cid)


def test_unreachable_engine_is_a_one_line_server_error(tmp_path):
    repo = copy_models(tmp_path, ["identity"])
    url = f"unix://{tmp_path}/no-such-dir/docker.sock"
    with pytest.raises(ServerError) as info:
        launch_docker(ServerOptions(mode="docker", model_repository=repo, docker_url=url))
    line = info.value.one_line()
    assert line.startswith(f"cannot reach the Docker engine at {url}: No such file or directory")
    assert "\n" not in str(info.value) and "--launch-mode local" in line


def test_missing_image_is_a_server_error_naming_it(tmp_path, make_engine):
    engine = make_engine(images=set(), pullable=set())
    repo = copy_models(tmp_path, ["identity"])
    with pytest.raises(ServerError) as info:
        launch_docker(
            ServerOptions(mode="docker", model_repository=repo, image="example.com/nope:1", docker_url=engine.url)
        )
    assert not isinstance(info.value, ServerStartError)
    assert info.value.message.startswith("cannot pull image example.com/nope:1: pull access denied")
    assert not engine.calls("POST", "/containers/create")


def test_bad_options_fail_before_the_engine_is_asked(tmp_path, make_engine):
    engine = make_engine()
    repo = copy_models(tmp_path, ["identity"])
    base = ServerOptions(mode="docker", model_repository=repo, docker_url=engine.url)
    with pytest.raises(UsageError, match="--gpus 'first'"):
        launch_docker(ServerOptions(**{**base.__dict__, "gpus": "first"}))
    with pytest.raises(InputError, match="--shm-size 'lots'"):
        launch_docker(ServerOptions(**{**base.__dict__, "shm_size": "lots"}))
    with pytest.raises(InputError, match="'nope' is not in the model repository"):
        launch_docker(ServerOptions(**{**base.__dict__, "models": ("nope",)}))
    assert engine.requests == []


@pytest.mark.usefixtures("tritonserver")
def test_container_exiting_during_startup_carries_the_log_tail(tmp_path, make_engine):
    engine = make_engine()
    repo = copy_models(tmp_path, ["identity"])
    cfg = repo / "identity" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace('backend: "python"', 'backend: "no_such_backend"'))
    log = tmp_path / "failed.log"
    opts = ServerOptions(mode="docker", model_repository=repo, docker_url=engine.url, log_path=log)
    with pytest.raises(ServerStartError) as info:
        launch_docker(opts)
    err = info.value
    assert re.fullmatch(r"container perfkit-triton-[0-9a-f]{8} \(\S+\) exited with code 1 during start-up", err.message)
    assert "no_such_backend" in err.log_tail
    assert str(log) in (err.hint or "") and "no_such_backend" in log.read_text()
    (cid,) = engine.removed
    assert engine.calls("DELETE", f"/containers/{cid}") and not engine.containers


@pytest.mark.usefixtures("tritonserver")
def test_cli_serve_in_docker_mode_until_ctrl_c(tmp_path, make_engine):
    engine = make_engine()
    repo = copy_models(tmp_path, ["identity"])
    proc = subprocess.Popen(
        [sys.executable, "-m", "perfkit", "serve", "--launch-mode", "docker", "--model-repository", str(repo)]
        + ["--docker-url", engine.url, "--model", "identity", "--shm-size", "64m"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out = []
        assert proc.stdout is not None
        for line in proc.stdout:
            out.append(line)
            if line.strip().startswith("models"):
                break
        text = "".join(out)
        assert "ready (docker)" in text and "identity" in text, (text, proc.stderr.read() if proc.stderr else "")
        (cid,) = engine.containers
        http = engine.create_body()["HostConfig"]["PortBindings"]["8000/tcp"][0]
        assert f"HTTP     {http['HostIp']}:{http['HostPort']}" in text
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
    body = engine.create_body()
    assert body["Cmd"][-1] == "--load-model=identity" and body["HostConfig"]["ShmSize"] == 64 * 1024**2
    assert not body["HostConfig"].get("DeviceRequests")
    _assert_removed(engine, cid)


@pytest.mark.usefixtures("tritonserver")
def test_container_left_running_is_removed_at_interpreter_exit(tmp_path, make_engine):
    engine = make_engine()
    repo = copy_models(tmp_path, ["identity"])
    script = (
        "from pathlib import Path\n"
        "from perfkit.server.launch import ServerOptions, open_server\n"
        f"server = open_server(ServerOptions(mode='docker', model_repository=Path({str(repo)!r})))\n"
        "print(server.container_id, flush=True)\n"  # no stop(): atexit must do it
    )
    # docker_url left out: the SDK's from_env() reads DOCKER_HOST
    env = {**os.environ, "DOCKER_HOST": engine.url}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr
    cid = done.stdout.strip()
    assert engine.removed[cid].server is not None
    _assert_removed(engine, cid)


def test_engine_lost_during_startup_is_a_server_error_naming_the_leftover(tmp_path, make_engine, caplog):
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

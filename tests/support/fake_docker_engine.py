"""A stand-in for the Docker Engine API, for what a real engine cannot be made to do in a test.

The tests run a real dockerd (tests/support/docker_engine.py). This fake is kept only where a real
engine cannot be made to behave as needed: pulling an image (no registry is reachable from the
test machines) and a daemon vanishing in the middle of a container's start-up. It speaks the
Docker Engine API calls the docker SDK makes (on a unix socket), records every request, and
when asked to start a container launches the bundled tritonserver through launch_local with the
bind-mount source as repository and the published host ports, so readiness and inference go to
a real server.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
import socketserver
import struct
import tempfile
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from perfkit.errors import ServerError
from perfkit.server import LocalLaunch, launch_local
from perfkit.server.local import LocalServer

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
    """A Docker Engine stand-in, only for what a real engine cannot be made to do in a test.

    That is: pull an image (no registry is reachable; `pullable` lists what a pull finds) and
    vanish mid-start (`kill()`). Everything else is tested against a real dockerd
    (tests/server/server/test_docker_mode.py). `launch=True` makes started containers real tritonservers.
    """

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
    """Make fake engines on short socket paths; closes them and fails on any call the fake does not know."""
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


def assert_removed(engine: FakeEngine, cid: str) -> None:
    """The container was stopped with a 10 s grace, then force-removed, each exactly once."""
    assert cid not in engine.containers and cid in engine.removed
    (stop,) = engine.calls("POST", f"/containers/{cid}/stop")
    assert stop.query["t"] == "10"
    (delete,) = engine.calls("DELETE", f"/containers/{cid}")
    assert delete.query["force"] in ("1", "True", "true")

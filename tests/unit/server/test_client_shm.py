"""Client shared memory and current Triton's consent to it (2.69.0 / 26.05 and later).

The refusal's text is the server's own, word for word: `src/common.h` (kClientShmDisabledErrorStr)
in triton-inference-server/server since PR #8721 (first released in v2.69.0), sent as the HTTP
error body (status 501) and the gRPC status message (UNIMPLEMENTED) of a registration.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import grpc
import pytest
import tritonclient.grpc._utils as grpc_utils
import tritonclient.http._utils as http_utils
from tritonclient.utils import InferenceServerException

from perfkit.errors import ExitCode, ServerError, ServerRefusedError
from perfkit.server import Endpoints, LocalLaunch, Server
from perfkit.server._client_shm import (
    ALLOW_CLIENT_SHM_FLAG,
    CLIENT_SHM_DISABLED,
    consent_refusal,
    knows_allow_client_shm,
)

TRITON_TEXT = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."


class _HttpResponse:
    """What tritonclient.http's error path reads of a response: a status code and a body."""

    def __init__(self, status_code: int, body: bytes) -> None:
        self.status_code = status_code
        self._body = body

    def read(self) -> bytes:
        return self._body


class _RpcError(grpc.RpcError):
    """A gRPC error as the channel raises it (code, details, debug string)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def debug_error_string(self) -> str:
        return f"{self._code}: {self._details}"


def _http_exception(text: str) -> InferenceServerException:
    error = http_utils._get_error(_HttpResponse(501, json.dumps({"error": text}).encode()))
    assert isinstance(error, InferenceServerException)
    return error


def _grpc_exception(text: str) -> InferenceServerException:
    return grpc_utils.get_error_grpc(_RpcError(grpc.StatusCode.UNIMPLEMENTED, text))


def test_the_constant_is_the_servers_text_word_for_word():
    assert CLIENT_SHM_DISABLED == TRITON_TEXT
    assert ALLOW_CLIENT_SHM_FLAG == "--allow-client-shm=true"


@pytest.mark.parametrize(
    "message",
    [TRITON_TEXT, _http_exception(TRITON_TEXT), _grpc_exception(TRITON_TEXT)],
    ids=["body-text", "http-InferenceServerException", "grpc-InferenceServerException"],
)
def test_a_consent_refusal_is_one_line_naming_the_flag_and_exits_as_a_server_refusal(message):
    err = consent_refusal(message, region="perfkit_1_ab_s0_in0")
    assert isinstance(err, ServerRefusedError) and isinstance(err, ServerError)
    assert err.exit_code == ExitCode.SERVER == 4
    line = err.one_line()
    assert "\n" not in line
    assert "--allow-client-shm=true" in line and "'perfkit_1_ab_s0_in0'" in line
    assert TRITON_TEXT in line  # the server's own words, not the status prefix tritonclient's str() adds
    assert "StatusCode" not in line and "[501]" not in line


@pytest.mark.parametrize(
    "text",
    [
        "Unable to register system shared memory region 'r': Unable to open shared memory region: '/r'",
        "shared memory region 'r' already in manager",
        "",
    ],
)
def test_other_shared_memory_errors_are_not_taken_for_a_consent_refusal(text):
    assert consent_refusal(text, region="r") is None
    assert consent_refusal(_http_exception(text or "x"), region="r") is None
    assert consent_refusal(_grpc_exception(text or "x"), region="r") is None


@pytest.mark.parametrize(
    ("kwargs", "knows"),
    [
        ({"server_version": "2.51.0"}, False),  # the bundled server (nvidia-pytriton 0.7.0)
        ({"server_version": "2.68.0"}, False),
        ({"server_version": "2.69.0"}, True),
        ({"server_version": "2.69.0dev"}, True),
        ({"server_version": "2.73.0"}, True),
        ({"server_version": "3.0.0"}, True),
        ({"image": "nvcr.io/nvidia/tritonserver:24.10-py3"}, False),  # perfkit's default image
        ({"image": "nvcr.io/nvidia/tritonserver:26.04-py3"}, False),
        ({"image": "nvcr.io/nvidia/tritonserver:26.05-py3"}, True),
        ({"image": "nvcr.io/nvidia/tritonserver:26.09-py3-sdk"}, True),
        ({"image": "localhost:5000/tritonserver:26.06"}, True),
        ({"image": "localhost:5000/tritonserver"}, False),
        ({"image": "tritonserver:latest"}, False),
        ({"image": "local/triton:custom"}, False),
        ({}, False),
        # the declared version wins over the tag (a re-tagged image)
        ({"server_version": "2.51.0", "image": "nvcr.io/nvidia/tritonserver:26.05-py3"}, False),
        ({"server_version": "2.70.0", "image": "local/triton:latest"}, True),
        # the binary's own --help wins over everything
        ({"help_text": "  --allow-client-shm <boolean>\n", "server_version": "2.51.0"}, True),
        ({"help_text": "  --allow-metrics <boolean>\n", "server_version": "2.73.0"}, False),
    ],
)
def test_whether_a_server_knows_the_flag(kwargs, knows):
    assert knows_allow_client_shm(**kwargs) is knows


# -- perfkit's own registration path (the HTTP admin API), against a stand-in --------------------


class _Refusing(BaseHTTPRequestHandler):
    """A STAND-IN for Triton 2.69.0+ started without --allow-client-shm: it answers every
    shared-memory register/unregister as that server does (501, the exact text of src/common.h).
    The bundled server (2.51.0) accepts registrations, so only a stand-in can produce the refusal here."""

    calls: list[str] = []

    def do_POST(self) -> None:  # noqa: N802  (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).calls.append(self.path)
        body = json.dumps({"error": TRITON_TEXT}).encode()
        self.send_response(501)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def refusing_server() -> Iterator[Server]:
    _Refusing.calls = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield Server(Endpoints("127.0.0.1", httpd.server_address[1], None, None), timeout_s=5)
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize("kind", ["system", "cuda"])
def test_registration_refused_for_consent_raises_the_server_refusal(refusing_server, kind):
    if kind == "system":
        register = lambda: refusing_server.register_system_shared_memory("r0", "/r0", 64)  # noqa: E731
        unregister = lambda: refusing_server.unregister_system_shared_memory("r0")  # noqa: E731
    else:
        register = lambda: refusing_server.register_cuda_shared_memory("r0", "aGFuZGxl", 0, 64)  # noqa: E731
        unregister = lambda: refusing_server.unregister_cuda_shared_memory("r0")  # noqa: E731
    for call in (register, unregister):
        with pytest.raises(ServerRefusedError, match=r"--allow-client-shm=true") as info:
            call()
        assert info.value.exit_code == ExitCode.SERVER
    prefix = "/v2/systemsharedmemory" if kind == "system" else "/v2/cudasharedmemory"
    assert _Refusing.calls == [f"{prefix}/region/r0/register", f"{prefix}/region/r0/unregister"]


def test_a_profile_with_system_shared_memory_stops_at_the_refusal_and_leaves_nothing(refusing_server):
    """perfkit's SharedMemory (what --shared-memory system runs) against the stand-in above: the
    first registration's refusal reaches the caller as the one-line server refusal at once (no
    wait on unregistering what the server never registered), and the region it created is unlinked."""
    import os
    import time

    from perfkit.loadgen import ModelIO, Tensor
    from perfkit.measure._shm import SharedMemory

    io = ModelIO(
        name="identity", version="", max_batch_size=0, inputs=(("INPUT0", "FP32", (4,)),), outputs=("OUTPUT0",)
    )
    steps = [[Tensor("INPUT0", "FP32", (4,), b"\0" * 16)]]
    t0 = time.monotonic()
    with pytest.raises(ServerRefusedError) as info, SharedMemory(refusing_server, "system", io, steps, 64):
        pass
    assert time.monotonic() - t0 < 5  # not the 10 s unregister retry
    assert "--allow-client-shm=true" in info.value.one_line()
    assert not [f for f in os.listdir("/dev/shm") if f.startswith(f"perfkit_{os.getpid()}_")]


# -- the command lines perfkit launches servers with ---------------------------------------------


def _fake_tritonserver(tmp_path: Path, help_lines: str) -> Path:
    binary = tmp_path / "tritonserver"
    binary.write_text(f"#!/bin/sh\ncat <<'EOF'\nUsage: tritonserver [options]\n{help_lines}EOF\n")
    binary.chmod(0o755)
    return binary


def test_local_launch_passes_the_flag_only_to_a_binary_that_knows_it(tmp_path):
    from perfkit.server import local

    new = _fake_tritonserver(tmp_path, "  --allow-client-shm <boolean>\n\tAllow clients to register ...\n")
    (tmp_path / "old").mkdir()
    old = _fake_tritonserver(tmp_path / "old", "  --allow-metrics <boolean>\n")
    asked = LocalLaunch(tmp_path, client_shm=True)
    assert local.allow_client_shm_args(asked, new, {}) == ["--allow-client-shm=true"]
    assert local.allow_client_shm_args(asked, old, {}) == []
    assert local.allow_client_shm_args(LocalLaunch(tmp_path), new, {}) == []  # shared memory not asked for
    user_said = LocalLaunch(tmp_path, client_shm=True, extra_args=("--allow-client-shm=false",))
    assert local.allow_client_shm_args(user_said, new, {}) == []  # the user's own value stands
    missing = LocalLaunch(tmp_path, client_shm=True)
    assert local.allow_client_shm_args(missing, tmp_path / "absent", {}) == []

    cmd = local._command(new, asked, None, (1, 2, 3), tmp_path, ["--allow-client-shm=true"])
    assert cmd.count("--allow-client-shm=true") == 1 and cmd.index("--allow-client-shm=true") > cmd.index(
        "--load-model=*"
    )
    assert "--allow-client-shm=true" not in local._command(new, LocalLaunch(tmp_path), None, (1, 2, 3), tmp_path)


def test_docker_launch_passes_the_flag_by_the_images_version_or_tag():
    from perfkit.server import docker as docker_mode
    from perfkit.server.launch import ServerOptions

    def opts(image: str, client_shm: bool = True) -> ServerOptions:
        return ServerOptions(mode="docker", image=image, client_shm=client_shm)

    assert docker_mode.allow_client_shm_args(opts("nvcr.io/nvidia/tritonserver:26.05-py3"), None) == [
        "--allow-client-shm=true"
    ]
    assert docker_mode.allow_client_shm_args(opts("nvcr.io/nvidia/tritonserver:24.10-py3"), None) == []
    assert docker_mode.allow_client_shm_args(opts("local/triton:dev"), "2.69.0") == ["--allow-client-shm=true"]
    assert docker_mode.allow_client_shm_args(opts("local/triton:dev"), "2.51.0") == []
    assert docker_mode.allow_client_shm_args(opts("nvcr.io/nvidia/tritonserver:26.05-py3", False), None) == []

    ngc = SimpleNamespace(attrs={"Config": {"Env": ["PATH=/usr/bin", "TRITON_SERVER_VERSION=2.69.0"]}})
    assert docker_mode.image_server_version(ngc) == "2.69.0"
    assert docker_mode.image_server_version(SimpleNamespace(attrs={"Config": {"Env": None}})) is None
    assert docker_mode.image_server_version(SimpleNamespace(attrs={})) is None
    assert docker_mode.image_server_version(None) is None

    cmd = docker_mode._command(("identity",), ["--allow-client-shm=true"])
    assert cmd[0] == "tritonserver" and cmd[-1] == "--allow-client-shm=true"
    assert "--allow-client-shm=true" not in docker_mode._command(("identity",))

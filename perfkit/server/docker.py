"""Docker mode: Triton in a container from an image (NGC's by default), through the Docker Engine API.

The container runs tritonserver with explicit model control on its usual ports
8000/8001/8002; those are published on the host at --bind-host (loopback unless asked)
on free ports or the ones given. The model repository is bind-mounted read-only at
/models. Stopping saves the container's log to a file, then removes the container.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import secrets
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker
import docker.errors
import docker.types
import docker.utils
import requests

from perfkit.errors import InputError, PortInUseError, ServerError, ServerStartError, UsageError
from perfkit.server._cache import cache_args
from perfkit.server._client_shm import ALLOW_CLIENT_SHM_FLAG, knows_allow_client_shm
from perfkit.server._ports import check_port_free, free_ports
from perfkit.server.base import Endpoints, Server
from perfkit.server.local import DEFAULT_SERVER_ENV
from perfkit.server.rate_limit import rate_limit_args

if TYPE_CHECKING:
    from perfkit.server.launch import ServerOptions

CONTAINER_REPO = "/models"
CONTAINER_PORTS = (8000, 8001, 8002)  # HTTP, gRPC, metrics inside the container
LABEL = {"perfkit": "1"}
STOP_GRACE_S = 10
_log = logging.getLogger(__name__)

# Any failure talking to the engine: the SDK's own errors, and requests' for a dropped connection.
_ENGINE_ERRORS = (docker.errors.DockerException, requests.exceptions.RequestException)
_GPU_ID = re.compile(r"\d+|GPU-[0-9A-Fa-f-]+|MIG-[0-9A-Fa-f/-]+")


def _reason(err: BaseException) -> str:
    """A short, one-line cause: the OS error at the bottom of the chain, else the engine's explanation."""
    seen: set[int] = set()
    cur: BaseException | None = err
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, OSError) and cur.strerror:
            return cur.strerror
        cur = cur.__cause__ or cur.__context__
    if isinstance(err, docker.errors.APIError) and err.explanation:
        text = str(err.explanation)
    else:
        text = str(err).removeprefix("Error while fetching server API version: ")
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:297] + "..."


def _device_requests(gpus: str | None) -> list[docker.types.DeviceRequest]:
    """--gpus as Docker device requests: 'all', ids '0,1' (or GPU UUIDs), None/'none' for no GPU."""
    if gpus is None or gpus.strip().lower() in ("", "none"):
        return []
    value = gpus.strip()
    if value.lower() == "all":
        return [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
    ids = [part.strip() for part in value.split(",")]
    if not all(_GPU_ID.fullmatch(i) for i in ids):
        raise UsageError(f"--gpus {gpus!r} is not 'all' or a list of GPU ids", hint="e.g. --gpus all or --gpus 0,1")
    return [docker.types.DeviceRequest(device_ids=ids, capabilities=[["gpu"]])]


def _shm_bytes(shm_size: str) -> int:
    try:
        return int(docker.utils.parse_bytes(shm_size))
    except (docker.errors.DockerException, ValueError) as err:
        raise InputError(f"--shm-size {shm_size!r} is not a size", hint="e.g. 1g, 512m") from err


def _check_repository(opts: ServerOptions) -> Path:
    assert opts.model_repository is not None
    repo = Path(opts.model_repository).resolve()
    if not repo.is_dir():
        raise InputError(
            f"model repository {opts.model_repository} does not exist or is not a directory",
            hint="pass --model-repository DIR",
        )
    for name in opts.models or ():
        if not (repo / name).is_dir():
            raise InputError(f"model {name!r} is not in the model repository {repo}", hint="check the model name")
    return repo


def image_server_version(image: Any) -> str | None:
    """The Triton version an image declares (NGC images set TRITON_SERVER_VERSION in their
    environment: the server repository's build.py); None where it declares none."""
    try:
        env = image.attrs.get("Config", {}).get("Env") or []
    except AttributeError:
        return None
    for item in env:
        key, _, value = str(item).partition("=")
        if key == "TRITON_SERVER_VERSION" and value:
            return value
    return None


def allow_client_shm_args(opts: ServerOptions, server_version: str | None) -> list[str]:
    """`--allow-client-shm=true` where clients will use shared memory and the image's server knows
    the flag (by its declared version, else its tag); nothing otherwise."""
    if not opts.client_shm:
        return []
    return [ALLOW_CLIENT_SHM_FLAG] if knows_allow_client_shm(server_version=server_version, image=opts.image) else []


def _command(models: tuple[str, ...] | None, consent: list[str] | None = None, extra: Sequence[str] = ()) -> list[str]:
    http, grpc, metrics = CONTAINER_PORTS
    cmd = [
        "tritonserver",
        f"--model-repository={CONTAINER_REPO}",
        "--model-control-mode=explicit",
        f"--http-port={http}",
        f"--grpc-port={grpc}",
        f"--metrics-port={metrics}",
        "--strict-readiness=true",
    ]
    loads = [f"--load-model={m}" for m in (models if models is not None else ("*",))]
    return cmd + loads + (consent or []) + list(extra)


def _connect(opts: ServerOptions) -> Any:
    where = opts.docker_url or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        if opts.docker_url:
            return docker.DockerClient(base_url=opts.docker_url)
        return docker.from_env()
    except _ENGINE_ERRORS as err:
        raise ServerError(
            f"cannot reach the Docker engine at {where}: {_reason(err)}",
            hint="start Docker (or point --docker-url/DOCKER_HOST at it), or use --launch-mode local",
        ) from err


def _ensure_image(client: Any, image: str) -> Any:
    """The image, pulled unless the engine has it; raises ServerError naming the image."""
    try:
        return client.images.get(image)
    except docker.errors.ImageNotFound:
        pass
    except _ENGINE_ERRORS as err:
        raise ServerError(f"cannot inspect image {image}: {_reason(err)}") from err
    try:
        return client.images.pull(image)
    except _ENGINE_ERRORS as err:
        raise ServerError(
            f"cannot pull image {image}: {_reason(err)}",
            hint="check --image, and `docker login` for a private registry (nvcr.io needs an NGC key)",
        ) from err


_LIVE: dict[int, DockerServer] = {}


def _stop_all_live() -> None:
    for server in list(_LIVE.values()):
        _stop_quietly(server)


def _stop_quietly(server: DockerServer) -> None:
    # For cleanup while another error is on its way out (or at exit): report, do not raise.
    try:
        server.stop()
    except ServerError as err:
        _log.warning("perfkit: %s", err.one_line())


atexit.register(_stop_all_live)


class DockerServer(Server):
    """A Triton container perfkit created; stop() saves its log and removes it."""

    mode = "docker"

    def __init__(self, endpoints: Endpoints, client: Any, container: Any, image: str, log_path: Path) -> None:
        super().__init__(endpoints)
        self._client = client
        self._container = container
        self.image = image
        self.container_name: str = container.name
        self.container_id: str = container.id
        self._log_path = log_path
        self._removed = False
        self._lock = threading.Lock()
        _LIVE[id(self)] = self

    @property
    def log_path(self) -> Path:
        """Where the container's log is saved when it is stopped (`docker logs NAME` before that)."""
        return self._log_path

    def status(self) -> str:
        """The container's state as the engine reports it now ('running', 'exited', ...; 'removed').

        Raises ServerError when the engine cannot be asked.
        """
        if self._removed:
            return "removed"
        try:
            self._container.reload()
        except docker.errors.NotFound:
            return "removed"
        except _ENGINE_ERRORS as err:
            raise ServerError(
                f"lost contact with the Docker engine about container {self.container_name}: {_reason(err)}",
                hint="check that Docker still runs",
            ) from err
        return str(self._container.status)

    def exit_code(self) -> int | None:
        """The container's exit code once it exited, else None."""
        if self.status() != "exited":
            return None
        return int(self._container.attrs.get("State", {}).get("ExitCode", -1))

    def alive(self) -> bool:
        return self.status() in ("running", "paused", "restarting")

    def log_tail(self, lines: int = 20) -> str:
        if not self._removed:
            try:
                raw = self._container.logs(stdout=True, stderr=True, tail=lines)
                return bytes(raw).decode(errors="replace").rstrip("\n")
            except _ENGINE_ERRORS:
                pass
        try:
            text = self._log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _save_logs(self) -> None:
        try:
            raw = self._container.logs(stdout=True, stderr=True)
        except _ENGINE_ERRORS:
            return
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self._log_path, "ab") as log:
            log.write(bytes(raw))

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """Stop (SIGTERM, SIGKILL after grace_s), save the log, remove the container. Idempotent.

        Raises ServerError when the engine cannot remove it (the message names the container).
        """
        with self._lock:
            if self._removed:
                return
            try:
                try:
                    self._container.stop(timeout=max(1, round(grace_s)))
                except docker.errors.NotFound:
                    pass
                else:
                    self._save_logs()
                self._container.remove(force=True)
            except docker.errors.NotFound:
                pass
            except _ENGINE_ERRORS as err:
                raise ServerError(
                    f"could not stop and remove container {self.container_name}: {_reason(err)}",
                    hint=f"remove it by hand: docker rm -f {self.container_name}",
                ) from err
            self._removed = True
            _LIVE.pop(id(self), None)
            try:
                self._client.close()
            except _ENGINE_ERRORS:
                pass

    def __exit__(self, *exc: object) -> None:
        if not exc or exc[0] is None:
            self.stop()
        else:
            _stop_quietly(self)  # do not hide the error that is already on its way out


def _host_ports(opts: ServerOptions) -> tuple[list[int | None], int]:
    chosen: list[int | None] = [opts.http_port, opts.grpc_port, opts.metrics_port]
    for port, what in zip(chosen, ("HTTP", "gRPC", "metrics")):
        if port is not None:
            check_port_free(opts.host, port, what)
    return chosen, (1 if all(p is not None for p in chosen) else 3)


def _start_error(name: str, image: str, err: BaseException) -> ServerError:
    reason = _reason(err)
    low = reason.lower()
    if "port is already allocated" in low or "address already in use" in low:
        return PortInUseError(f"container {name} could not publish its ports: {reason}", hint="pick other ports")
    hint = None
    if "gpu" in low or "device driver" in low or "nvidia" in low:
        hint = "install the NVIDIA Container Toolkit on the Docker host, or leave out --gpus"
    return ServerStartError(f"container {name} from {image} failed to start: {reason}", hint=hint)


def launch_docker(opts: ServerOptions) -> DockerServer:
    """Run Triton in a container and wait until it is ready.

    Pulls opts.image if the engine lacks it. Raises InputError/UsageError for bad options,
    ServerError when the engine is unreachable or the image cannot be had, PortInUseError,
    and ServerStartError (with the log tail) when the container fails or exits during start-up.
    """
    repo = _check_repository(opts)
    devices = _device_requests(opts.gpus)
    shm = _shm_bytes(opts.shm_size)
    chosen, attempts = _host_ports(opts)
    env = {**DEFAULT_SERVER_ENV, **opts.env}
    client = _connect(opts)
    try:
        consent = allow_client_shm_args(opts, image_server_version(_ensure_image(client, opts.image)))
    except BaseException:
        client.close()
        raise
    last_error: ServerError | None = None
    for _ in range(attempts):
        auto = iter(free_ports(3, opts.host))
        ports = [p if p is not None else next(auto) for p in chosen]
        name = f"perfkit-triton-{secrets.token_hex(4)}"
        if opts.log_path is None:
            log_path = Path(tempfile.mkdtemp(prefix="perfkit-server-")) / "tritonserver.log"
        else:
            log_path = Path(opts.log_path)
        try:
            container = client.containers.create(
                opts.image,
                command=_command(opts.models, consent, [*rate_limit_args(opts), *cache_args(opts.response_cache)]),
                name=name,
                labels=LABEL,
                environment=env,
                volumes={str(repo): {"bind": CONTAINER_REPO, "mode": "ro"}},
                ports={f"{c}/tcp": (opts.host, h) for c, h in zip(CONTAINER_PORTS, ports)},
                shm_size=shm,
                device_requests=devices or None,
            )
        except _ENGINE_ERRORS as err:
            client.close()
            raise ServerStartError(f"cannot create a container from {opts.image}: {_reason(err)}") from err
        server = DockerServer(Endpoints(opts.host, *ports), client, container, opts.image, log_path)
        try:
            container.start()
        except _ENGINE_ERRORS as err:
            _stop_quietly(server)
            last_error = _start_error(name, opts.image, err)
            if isinstance(last_error, PortInUseError) and attempts > 1:
                client = _connect(opts)  # stop() closed the old session
                continue
            raise last_error from err
        except BaseException:
            _stop_quietly(server)
            raise
        try:
            server.wait_ready(opts.startup_timeout_s)
            return server
        except ServerStartError as err:
            try:
                code = server.exit_code()
            except ServerError:
                code = None
            tail = server.log_tail(40) or err.log_tail
            _stop_quietly(server)
            if code is None:
                raise
            raise ServerStartError(
                f"container {name} ({opts.image}) exited with code {code} during start-up",
                hint=f"its log is saved in {log_path}",
                log_tail=tail,
            ) from err
        except BaseException:
            _stop_quietly(server)
            raise
    assert last_error is not None
    raise last_error

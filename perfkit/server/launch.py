"""One entry point for every launch mode: local (default), docker, remote."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from perfkit.errors import UsageError
from perfkit.records import TlsSpec
from perfkit.server._cache import cache_args
from perfkit.server.base import Server
from perfkit.server.local import LocalLaunch, launch_local
from perfkit.server.rate_limit import rate_limit_args
from perfkit.server.remote import attach_remote

LaunchMode = Literal["local", "docker", "remote"]
DEFAULT_IMAGE = "nvcr.io/nvidia/tritonserver:24.10-py3"


@dataclass(frozen=True)
class ServerOptions:
    """How to get a server, whatever the mode. Unused fields are ignored by a mode."""

    mode: LaunchMode = "local"
    model_repository: Path | None = None
    models: tuple[str, ...] | None = None
    host: str = "127.0.0.1"
    http_port: int | None = None
    grpc_port: int | None = None
    metrics_port: int | None = None
    startup_timeout_s: float = 120.0
    env: Mapping[str, str] = field(default_factory=dict)
    log_path: Path | None = None
    # clients will use shared memory: a launched server that knows --allow-client-shm is started with it
    client_shm: bool = False
    # Triton's --rate-limit mode for a launched server ("off", its default, or "execution_count":
    # instances' rate_limiter resources and priorities apply), and its --rate-limit-resource
    # values (NAME:COUNT[:DEVICE]); a reached server's own are checked (server/rate_limit.py)
    rate_limit: str = "off"
    rate_limit_resources: tuple[str, ...] = ()
    # start the server with a local response cache (server/_cache.py): a search of the response_cache knob
    response_cache: bool = False
    # local
    tritonserver: Path | None = None
    backend_directory: Path | None = None
    # docker
    image: str = DEFAULT_IMAGE
    gpus: str | None = None  # "all", "0,1", or None for no GPU
    shm_size: str = "1g"
    docker_url: str | None = None  # DOCKER_HOST override
    # remote
    url: str | None = None
    grpc_url: str | None = None
    metrics_url: str | None = None
    tls: TlsSpec | None = None  # the admin API over HTTPS (an https:// -u / --admin-url)


def open_server(opts: ServerOptions) -> Server:
    """Launch or attach per opts.mode; the caller stops it (use as a context manager)."""
    if opts.mode == "remote":
        if not opts.url:
            raise UsageError("--launch-mode remote needs -u/--url of a running Triton server")
        return attach_remote(opts.url, grpc_url=opts.grpc_url, metrics_url=opts.metrics_url, tls=opts.tls)
    if opts.model_repository is None:
        raise UsageError(f"--launch-mode {opts.mode} needs --model-repository DIR")
    if opts.mode == "docker":
        from perfkit.server.docker import launch_docker  # noqa: PLC0415  (docker SDK only when used)

        return launch_docker(opts)
    return launch_local(
        LocalLaunch(
            model_repository=opts.model_repository,
            models=opts.models,
            tritonserver=opts.tritonserver,
            backend_directory=opts.backend_directory,
            host=opts.host,
            http_port=opts.http_port,
            grpc_port=opts.grpc_port,
            metrics_port=opts.metrics_port,
            startup_timeout_s=opts.startup_timeout_s,
            env=dict(opts.env),
            log_path=opts.log_path,
            client_shm=opts.client_shm,
            extra_args=(*rate_limit_args(opts), *cache_args(opts.response_cache)),
        )
    )

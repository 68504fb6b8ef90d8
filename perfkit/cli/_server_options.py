"""Server options shared by serve, profile and tune: one decorator, one builder."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from perfkit.server.launch import DEFAULT_IMAGE, LaunchMode, ServerOptions

F = TypeVar("F", bound=Callable[..., Any])


def _parse_env(values: tuple[str, ...]) -> dict[str, str]:
    env = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--server-env")
        env[key] = value
    return env


def server_options(*, url_flag: bool = True) -> Callable[[F], F]:
    """Add the launch options to a click command (as kwargs prefixed by nothing)."""

    def deco(fn: F) -> F:
        opts = [
            click.option(
                "--launch-mode",
                type=click.Choice(["local", "docker", "remote"]),
                default=None,
                help="How to get a server: launch the bundled/local tritonserver (default without -u), "
                "a docker image, or use a running one at -u (default with -u).",
            ),
            click.option(
                "--model-repository",
                type=click.Path(path_type=Path),
                default=None,
                help="Model repository the launched server serves (for remote: the folder that server reads).",
            ),
            click.option("--tritonserver", type=click.Path(path_type=Path), help="tritonserver binary (local mode)."),
            click.option("--backend-directory", type=click.Path(path_type=Path), help="Backends folder (local mode)."),
            click.option("--image", default=DEFAULT_IMAGE, show_default=True, help="Triton image (docker mode)."),
            click.option("--gpus", default=None, help="GPUs for docker mode: 'all' or ids '0,1'. Default: none."),
            click.option("--shm-size", default="1g", show_default=True, help="Container shm size (docker mode)."),
            click.option(
                "--docker-url",
                default=None,
                help="Docker Engine for docker mode, e.g. unix:///var/run/docker.sock. Default: DOCKER_HOST or local.",
            ),
            click.option(
                "--bind-host",
                default="127.0.0.1",
                show_default=True,
                help="Address a launched server listens on. Loopback unless you ask otherwise.",
            ),
            click.option("--http-port", type=int, help="HTTP port of a launched server (default: a free one)."),
            click.option("--grpc-port", type=int, help="gRPC port of a launched server (default: a free one)."),
            click.option(
                "--server-metrics-port",
                type=int,
                help="Triton's metrics port of a launched server (default: a free one; --metrics-port is perfkit's).",
            ),
            click.option(
                "--startup-timeout", type=float, default=120.0, show_default=True, help="Seconds to wait for ready."
            ),
            click.option(
                "--server-env",
                multiple=True,
                metavar="KEY=VALUE",
                help="Environment for a launched server (repeatable), e.g. OPENBLAS_NUM_THREADS=2.",
            ),
            click.option("--server-log", type=click.Path(path_type=Path), help="Write the server's log here."),
        ]
        for opt in reversed(opts):
            fn = opt(fn)
        return fn

    return deco


SERVER_KWARGS = (
    "launch_mode",
    "model_repository",
    "tritonserver",
    "backend_directory",
    "image",
    "gpus",
    "shm_size",
    "docker_url",
    "bind_host",
    "http_port",
    "grpc_port",
    "server_metrics_port",
    "startup_timeout",
    "server_env",
    "server_log",
)


def build_server_options(
    kwargs: dict[str, Any],
    *,
    url: str | None = None,
    grpc_url: str | None = None,
    metrics_url: str | None = None,
    models: tuple[str, ...] | None = None,
) -> ServerOptions:
    """Pop the launch options out of a command's kwargs and build ServerOptions."""
    k = {name: kwargs.pop(name) for name in SERVER_KWARGS}
    mode: LaunchMode = k["launch_mode"] or ("remote" if url else "local")
    return ServerOptions(
        mode=mode,
        model_repository=k["model_repository"],
        models=models,
        host=k["bind_host"],
        http_port=k["http_port"],
        grpc_port=k["grpc_port"],
        metrics_port=k["server_metrics_port"],
        startup_timeout_s=k["startup_timeout"],
        env=_parse_env(k["server_env"]),
        log_path=k["server_log"],
        tritonserver=k["tritonserver"],
        backend_directory=k["backend_directory"],
        image=k["image"],
        gpus=k["gpus"],
        shm_size=k["shm_size"],
        docker_url=k["docker_url"],
        url=url,
        grpc_url=grpc_url,
        metrics_url=metrics_url,
    )

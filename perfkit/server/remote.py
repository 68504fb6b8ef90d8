"""Remote mode: a Triton server someone else runs; perfkit launches nothing."""

from __future__ import annotations

from perfkit.errors import UsageError
from perfkit.records import TlsSpec
from perfkit.server.base import Endpoints, Server


def parse_host_port(url: str, *, what: str = "URL") -> tuple[str, int]:
    """Split 'host:port' (scheme tolerated); raises UsageError."""
    text = url.split("://", 1)[-1].rstrip("/")
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise UsageError(f"{what} {url!r} is not host:port", hint="e.g. -u localhost:8000")
    return host.strip("[]"), int(port)


def attach_remote(
    http_url: str,
    *,
    grpc_url: str | None = None,
    metrics_url: str | None = None,
    check: bool = True,
    tls: TlsSpec | None = None,
) -> Server:
    """A Server for an existing endpoint (admin API over HTTPS with tls); raises ServerError if check and not ready."""
    host, http_port = parse_host_port(http_url, what="HTTP URL")
    grpc_port = parse_host_port(grpc_url, what="gRPC URL")[1] if grpc_url else None
    metrics_port = parse_host_port(metrics_url.split("/metrics")[0], what="metrics URL")[1] if metrics_url else None
    server = Server(Endpoints(host, http_port, grpc_port, metrics_port), tls=tls)
    if check and not server.is_ready():
        server.metadata()  # raises a ServerError naming why it is unreachable
    return server

"""Free-port selection and port checks for launched servers."""

from __future__ import annotations

import socket

from perfkit.errors import PortInUseError


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """Ports that were free a moment ago (bound and released together so they differ)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def check_port_free(host: str, port: int, what: str) -> None:
    """Raise PortInUseError if host:port cannot be bound now."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as err:
            raise PortInUseError(
                f"{what} port {port} on {host} is already in use ({err.strerror})",
                hint="pick another port or leave it out to get a free one",
            ) from err

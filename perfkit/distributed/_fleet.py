"""A profile run on a Ray cluster against a fleet: place the load workers, attach the other servers.

What `perfkit profile --ray ADDRESS -u A,B,...` runs: the first server is the one the caller
opened (launched or attached); the others are attached as remote servers; the workers are
placed on the cluster's live nodes (those offering a custom resource, when one is named).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from perfkit.distributed._cluster import alive_nodes, connect
from perfkit.distributed._run import profile_distributed
from perfkit.measure import Progress
from perfkit.records import ProfileSpec, RunRecord
from perfkit.server.base import Server
from perfkit.server.remote import attach_remote, parse_host_port

log = logging.getLogger(__name__)


def fleet_hosts(address: str, client_hosts: int | None, client_resource: str | None) -> int:
    """How many load workers a run places: client_hosts, or one per live node (offering client_resource)."""
    ray = connect(address)
    nodes = alive_nodes(ray)
    if client_resource:
        nodes = [n for n in nodes if float(n.get("Resources", {}).get(client_resource, 0)) > 0]
    return client_hosts if client_hosts is not None else max(1, len(nodes))


def attach_fleet(server: Server, more_urls: Sequence[str], protocol: str) -> list[Server]:
    """The fleet: server first, then each other URL attached as a remote server (gRPC: HTTP admin on port-1)."""
    fleet: list[Server] = [server]
    for u in more_urls:
        grpc_url = None
        if protocol == "grpc":
            host, port = parse_host_port(u)
            grpc_url, u = u, f"{host}:{port - 1}"
        fleet.append(attach_remote(u, grpc_url=grpc_url))
    return fleet


def profile_fleet(
    server: Server,
    spec: ProfileSpec,
    *,
    address: str,
    hosts: int,
    more_urls: Sequence[str] = (),
    client_resource: str | None = None,
    command: tuple[str, ...] = (),
    on_progress: Progress | None = None,
    record_path: Path | None = None,
) -> RunRecord:
    """Measure spec with `hosts` load workers on the Ray cluster at address, against server and more_urls.

    Raises like profile_distributed (MeasurementError after saving a partial record).
    """
    fleet = attach_fleet(server, more_urls, spec.protocol)
    log.info("%d load worker(s) on Ray (%s), %d server(s)", hosts, address, len(fleet))
    return profile_distributed(
        fleet,
        spec,
        address=address,
        client_hosts=hosts,
        node_resource=client_resource,
        command=command,
        on_progress=on_progress,
        record_path=record_path,
    )

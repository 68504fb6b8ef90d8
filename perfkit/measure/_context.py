"""Run-record context: machine, server, served model config, and the record itself."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import platform
import socket
from typing import Any

from perfkit import __version__
from perfkit.records import LevelResult, ProfileSpec, RunRecord, to_dict
from perfkit.server.base import Server


def machine_info() -> dict[str, Any]:
    """What the client machine is: enough to refuse comparing runs from different machines."""
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": cpu,
        "cpu_count": os.cpu_count(),
    }


def config_sha256(config: dict[str, Any]) -> str:
    """Stable hash of a served model config (JSON, keys sorted)."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def server_info(server: Server, protocol: str) -> dict[str, Any]:
    """Version, URLs and launch mode of the server measured."""
    try:
        version = server.version()
    except Exception:
        version = "unknown"
    ep = server.endpoints
    return {
        "version": version,
        "mode": server.mode,
        "protocol": protocol,
        "http_url": ep.http_url,
        "grpc_url": ep.grpc_url,
        "metrics_url": ep.metrics_url,
    }


def make_record(
    *,
    spec: ProfileSpec,
    command: tuple[str, ...],
    server: dict[str, Any],
    model_config: dict[str, Any],
    levels: list[LevelResult],
    status: str = "ok",
    error: str | None = None,
    created_utc: str | None = None,
) -> RunRecord:
    """Assemble the run record (the unit of truth) from what was measured so far."""
    return RunRecord(
        perfkit_version=__version__,
        created_utc=created_utc or dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        command=tuple(command),
        machine=machine_info(),
        server=server,
        model={
            "name": spec.model,
            "version": spec.model_version,
            "config": model_config,
            "config_sha256": config_sha256(model_config),
        },
        spec=to_dict(spec),
        levels=tuple(levels),
        status=status,  # type: ignore[arg-type]
        error=error,
    )

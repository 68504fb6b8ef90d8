"""Run-record context: machine, server, served model config, and the record itself."""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import platform
import socket
from typing import Any

from perfkit import __version__
from perfkit.records import LevelResult, Machine, ModelInfo, ProfileSpec, RepeatStats, RunRecord, ServerInfo
from perfkit.server.base import Server


def machine_info() -> Machine:
    """The one machine builder: what the client machine is (run and tune records both use it).

    Probes the host (/proc/cpuinfo, sysconf, pynvml when installed); a field it cannot read
    stays unknown rather than failing the run.
    """
    return Machine(
        hostname=socket.gethostname(),
        platform=platform.platform(),
        python=platform.python_version(),
        arch=platform.machine(),
        cpu_model=_cpu_model(),
        cpu_count=os.cpu_count(),
        memory_total_bytes=_memory_total_bytes(),
        gpus=_gpu_names(),
    )


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _memory_total_bytes() -> int | None:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # not on every platform
        return None


def _gpu_names() -> tuple[str, ...] | None:
    try:
        import pynvml  # noqa: PLC0415  (optional: only where NVIDIA's library is installed)

        pynvml.nvmlInit()
    except Exception:  # no pynvml or no driver: which GPUs there are is not known
        return None
    try:
        names = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
            names.append(name.decode() if isinstance(name, bytes) else str(name))
        return tuple(names)
    except Exception:  # a driver that answers init but not the queries: leave GPUs unknown
        return None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def served_config_sha256(config: dict[str, Any]) -> str:
    """Stable hash of a served model config (its JSON, keys sorted): what the server ran."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def server_info(server: Server, protocol: str) -> ServerInfo:
    """Version, URLs and launch mode of the server measured."""
    try:
        version = server.version()
    except Exception:  # a server that will not say its version is still measured; the record says so
        version = "unknown"
    ep = server.endpoints
    return ServerInfo(
        version=version,
        mode=server.mode,
        protocol=protocol,
        http_url=ep.http_url,
        grpc_url=ep.grpc_url,
        metrics_url=ep.metrics_url,
    )


def make_record(
    *,
    spec: ProfileSpec,
    command: tuple[str, ...],
    server: ServerInfo,
    model_config: dict[str, Any],
    levels: list[LevelResult],
    status: str = "ok",
    error: str | None = None,
    created_utc: str | None = None,
    repeats: RepeatStats | None = None,
) -> RunRecord:
    """Assemble the run record (the unit of truth) from what was measured so far."""
    return RunRecord(
        perfkit_version=__version__,
        created_utc=created_utc or dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        command=tuple(command),
        machine=machine_info(),
        server=server,
        model=ModelInfo(
            name=spec.model,
            version=spec.model_version,
            config=model_config,
            served_config_sha256=served_config_sha256(model_config),
        ),
        spec=spec,
        levels=tuple(levels),
        status=status,  # type: ignore[arg-type]  # profile() passes only ok, failed or interrupted
        error=error,
        repeats=repeats,
    )

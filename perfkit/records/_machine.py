"""Where a run was measured: the client machine, the server, the model as served."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

# Machine fields that identify hardware (hostnames change per CI job: not among them).
HARDWARE_FIELDS = ("arch", "cpu_model", "cpu_count", "memory_total_bytes", "gpus")
# Names older records used for those fields.
_MACHINE_ALIASES = {
    "cpu": "cpu_model",
    "logical_cpus": "cpu_count",
    "memory_bytes": "memory_total_bytes",
    "gpu": "gpus",
    "gpu_names": "gpus",
    "gpu_models": "gpus",
    "machine": "arch",
    "os": "platform",
}


@dataclass(frozen=True)
class Machine:
    """The client machine a run was measured on: enough to refuse comparing different hardware."""

    hostname: str = ""
    platform: str = ""
    python: str = ""
    arch: str = ""
    cpu_model: str = ""
    cpu_count: int | None = None
    memory_total_bytes: int | None = None
    gpus: tuple[str, ...] | None = None  # None: not known; (): none found

    def differences(self, other: Machine) -> list[str]:
        """The rule for "same machine", in one place: the hardware fields known on both sides that differ.

        The hostname counts only when no hardware field is known on both sides (CI runners of
        one kind have new hostnames per job).
        """
        both = [k for k in HARDWARE_FIELDS if _known(getattr(self, k)) and _known(getattr(other, k))]
        keys = both or (["hostname"] if self.hostname and other.hostname else [])
        return [
            f"{k} {getattr(self, k)!r} vs {getattr(other, k)!r}" for k in keys if getattr(self, k) != getattr(other, k)
        ]

    def identity(self) -> str:
        """A short key of the hardware (for a results store's index): hostname, then the hardware fields."""
        hardware = ",".join(f"{k}={getattr(self, k)}" for k in HARDWARE_FIELDS if _known(getattr(self, k)))
        return f"{self.hostname}:{hardware}"

    @classmethod
    def from_mapping(cls, data: Any) -> Machine:
        """From a record's machine object, of this shape or an older one (aliases read, other keys ignored)."""
        if isinstance(data, Machine):
            return data
        if not isinstance(data, dict):
            raise TypeError(f"machine must be an object, got {type(data).__name__}")
        values: dict[str, Any] = {}
        for key, value in data.items():
            name = _MACHINE_ALIASES.get(key, key)
            if name in _MACHINE_FIELD_NAMES and value is not None and name not in values:
                values[name] = value
        if "gpus" in values:
            gpus = values["gpus"]
            values["gpus"] = tuple(str(g) for g in gpus) if isinstance(gpus, (list, tuple)) else (str(gpus),)
        for key in ("cpu_count", "memory_total_bytes"):
            if key in values:
                values[key] = int(values[key])
        return cls(**values)


def _known(value: Any) -> bool:
    return value is not None and value != ""


@dataclass(frozen=True)
class ServerInfo:
    """The server a run measured: its version, launch mode, the protocol used and its URLs."""

    version: str = ""
    mode: str = ""  # local, docker, remote
    protocol: str = ""  # http or grpc: what the load was sent over
    http_url: str | None = None
    grpc_url: str | None = None
    metrics_url: str | None = None

    @classmethod
    def from_mapping(cls, data: Any) -> ServerInfo:
        """From a record's server object (older records: extra keys ignored, 'url' and 'launch_mode' read)."""
        if isinstance(data, ServerInfo):
            return data
        if not isinstance(data, dict):
            raise TypeError(f"server must be an object, got {type(data).__name__}")
        values = {k: data[k] for k in _SERVER_FIELD_NAMES if data.get(k) is not None}
        if "http_url" not in values and data.get("url"):
            values["http_url"] = data["url"]
        if "mode" not in values and data.get("launch_mode"):
            values["mode"] = data["launch_mode"]
        return cls(**{k: str(v) for k, v in values.items()})


@dataclass(frozen=True)
class ModelInfo:
    """The model measured and the config the server applied (as the server reports it, JSON)."""

    name: str
    version: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    # sha256 of the served config's JSON (keys sorted): what the server ran. Not the hash of a
    # config.pbtxt file (the tuner's config_pbtxt_sha256): the same config gives two different hashes.
    served_config_sha256: str = ""

    @classmethod
    def from_mapping(cls, data: Any) -> ModelInfo:
        """From a record's model object; older records stored the hash under 'config_sha256'."""
        if isinstance(data, ModelInfo):
            return data
        if not isinstance(data, dict):
            raise TypeError(f"model must be an object, got {type(data).__name__}")
        return cls(
            name=str(data["name"]),
            version=str(data.get("version") or ""),
            config=dict(data.get("config") or {}),
            served_config_sha256=str(data.get("served_config_sha256") or data.get("config_sha256") or ""),
        )


_MACHINE_FIELD_NAMES = {f.name for f in dataclasses.fields(Machine)}
_SERVER_FIELD_NAMES = {f.name for f in dataclasses.fields(ServerInfo)}

"""The run record: one profile run, the unit of truth reports and gates read."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from perfkit.errors import InputError
from perfkit.records._level import LevelResult
from perfkit.records._load import ProfileSpec
from perfkit.records._machine import Machine, ModelInfo, ServerInfo
from perfkit.records._serial import _read_json, _save_json, from_dict, to_dict

RUN_SCHEMA = "perfkit.run"
RUN_SCHEMA_VERSION = 2  # 2: typed machine, server, model and spec; model.served_config_sha256


@dataclass(frozen=True)
class RepeatStats:
    """How often the run's requests repeat an earlier request's inputs (what a response cache can hit).

    Counted over one pass of the sequence of requests the load cycles through (`requests` long,
    `distinct_inputs` of them distinct): past a pass the sequence starts again and every request
    repeats one already sent. `source`: "generated" (--repeat-fraction) or the input file.
    """

    fraction_sent: float
    distinct_inputs: int
    requests: int
    source: str
    fraction_asked: float | None = None  # --repeat-fraction; None for a file's own repeats


@dataclass(frozen=True)
class RunRecord:
    """One profile run: spec, what was served, where, and what was measured."""

    perfkit_version: str
    created_utc: str
    command: tuple[str, ...]
    machine: Machine
    server: ServerInfo
    model: ModelInfo
    spec: ProfileSpec  # the full measurement spec
    levels: tuple[LevelResult, ...]
    status: Literal["ok", "failed", "interrupted"] = "ok"
    error: str | None = None
    # Distributed runs only: Ray address, nodes, workers and their clock offsets, the fleet's URLs.
    distributed: dict[str, Any] = field(default_factory=dict)
    repeats: RepeatStats | None = None  # requests repeating earlier inputs (--repeat-fraction, a file's)
    schema: str = RUN_SCHEMA
    schema_version: int = RUN_SCHEMA_VERSION

    def to_json(self) -> str:
        """Serialize to JSON text."""
        return json.dumps(to_dict(self), indent=1, sort_keys=False)

    def save(self, path: Path) -> Path:
        """Write atomically (temp file then rename); returns path."""
        return _save_json(to_dict(self), Path(path))

    @classmethod
    def load(cls, path: Path) -> RunRecord:
        """Read a run record file; raises InputError naming the file and what is wrong."""
        return cls.from_dict(_read_json(Path(path), "run record"), source=str(path))

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<run record>") -> RunRecord:
        """Build from parsed JSON; raises InputError on another schema or version."""
        if not isinstance(data, dict) or data.get("schema") != RUN_SCHEMA:
            raise InputError(f"{source} is not a perfkit run record (field 'schema' is not {RUN_SCHEMA!r})")
        version = data.get("schema_version")
        if version not in (1, RUN_SCHEMA_VERSION):
            raise InputError(
                f"{source} has schema_version {version!r}; this perfkit reads versions 1 to {RUN_SCHEMA_VERSION}",
                hint="read it with the perfkit version that wrote it, or re-run the profile with this one",
            )
        try:
            if version == 1:
                data = _run_v1_to_v2(data)
            return from_dict(cls, data)
        except (TypeError, KeyError, ValueError) as err:
            raise InputError(f"{source} is a malformed run record: {err}") from None


def _run_v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    """A version-1 run record (machine, server, model, spec as free-form objects) in version 2's shape."""
    out = dict(data, schema_version=RUN_SCHEMA_VERSION)
    model = out.get("model") or {}
    spec = dict(out.get("spec") or {})
    known = {f.name for f in dataclasses.fields(ProfileSpec)}
    spec = {k: v for k, v in spec.items() if k in known}
    spec.setdefault("model", model.get("name", ""))
    spec.setdefault("levels", [lv.get("load") for lv in out.get("levels") or [] if isinstance(lv, dict)])
    out["spec"] = spec
    return out

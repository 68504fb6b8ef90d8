"""Which levels of two runs are compared, and what differs between the runs besides the measurement.

One pairing rule for the gate and the comparison report: a level is the same level when its
load mode, load value, arrival distribution and batch size are the same. Repeated runs of one
side are pooled exactly (HdrHistograms added, windows concatenated) before they are compared.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from perfkit.gate.merge import merge_levels
from perfkit.records import LevelResult, RunRecord

LevelKey = tuple[str, float, str, int]


def level_key(level: LevelResult) -> LevelKey:
    """What makes two levels the same level: load mode and value, arrival distribution, batch size."""
    distribution: str = level.load.distribution or ("constant" if level.load.mode == "request_rate" else "")
    if distribution == "onoff":
        on_ms, off_ms = level.load.bursts_ms
        distribution = f"onoff {on_ms:g}/{off_ms:g} ms"
    return (level.load.mode, float(level.load.value), distribution, level.batch_size)


def level_label(level: LevelResult) -> str:
    """The level's name in findings and tables: its load, and its batch size when not 1."""
    return level.load.label + (f" x batch {level.batch_size}" if level.batch_size != 1 else "")


def pooled_levels(records: Sequence[RunRecord]) -> dict[LevelKey, LevelResult]:
    """Each level of the runs of one side, repeated runs of a level pooled exactly (in run order).

    Raises InputError (from merge_levels) when repeated levels' histograms cannot be merged exactly.
    """
    groups: dict[LevelKey, list[LevelResult]] = {}
    for rec in records:
        for lv in rec.levels:
            groups.setdefault(level_key(lv), []).append(lv)
    return {key: merge_levels(levels) for key, levels in groups.items()}


def _protocol(record: RunRecord) -> str:
    return record.spec.protocol or record.server.protocol


def load_differences(baseline: RunRecord, current: RunRecord) -> list[str]:
    """How the load of two runs differs (levels, protocol, input shapes and data), one item each."""
    diffs = []
    b_levels = [lv for lv in baseline.levels]
    c_levels = [lv for lv in current.levels]
    if [level_key(lv) for lv in b_levels] != [level_key(lv) for lv in c_levels]:
        diffs.append(f"levels {fmt_levels(b_levels)} vs {fmt_levels(c_levels)}")
    if _protocol(baseline) != _protocol(current):
        diffs.append(f"protocol {_protocol(baseline) or '?'} vs {_protocol(current) or '?'}")
    for key in ("shapes", "shared_memory", "input_data"):
        b, c = getattr(baseline.spec, key), getattr(current.spec, key)
        if b != c and not (key == "input_data" and isinstance(b, str) and b.endswith(".json")):
            diffs.append(f"{key} {b!r} vs {c!r}")
    return diffs


def fmt_levels(levels: Sequence[LevelResult]) -> str:
    """Levels as one bracketed list of their labels."""
    return "[" + ", ".join(level_label(lv) for lv in levels) + "]"


def config_changes(baseline: RunRecord, current: RunRecord, limit: int = 12) -> list[str]:
    """What changed between the two runs' model configs and servers, one line each."""
    out = []
    b_ver, c_ver = baseline.server.version, current.server.version
    if b_ver != c_ver:
        out.append(f"server version {b_ver} -> {c_ver}")
    if baseline.model.served_config_sha256 != current.model.served_config_sha256:
        b_flat = _flatten(baseline.model.config)
        c_flat = _flatten(current.model.config)
        keys = sorted(set(b_flat) | set(c_flat))
        diffs = [
            f"config {k}: {b_flat.get(k, '(unset)')} -> {c_flat.get(k, '(unset)')}"
            for k in keys
            if b_flat.get(k) != c_flat.get(k)
        ]
        if not diffs:
            diffs = ["config hash differs (no field-level difference in the recorded config)"]
        out += diffs[:limit] + ([f"... and {len(diffs) - limit} more config changes"] if len(diffs) > limit else [])
    return out


def _flatten(value: Any, prefix: str = "") -> dict[str, str]:
    if isinstance(value, dict):
        flat: dict[str, str] = {}
        for k, v in value.items():
            flat.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return flat
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        flat = {}
        for i, v in enumerate(value):
            flat.update(_flatten(v, f"{prefix}[{i}]"))
        return flat
    return {prefix: json.dumps(value) if not isinstance(value, str) else value}

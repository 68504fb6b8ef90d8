"""Unit parsers: durations, latencies, sizes, rates and percentages as the CLI and the sweep
files write them, each into the unit its name says. One module, so every command reads '20ms'
or '8GiB' the same way. A leaf: it imports nothing from perfkit but errors.
"""

from __future__ import annotations

import re

from perfkit.errors import UsageError

_UNITS_S = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration_s(text: str | float, *, default_unit: str = "s", what: str = "duration") -> float:
    """'20ms', '1.5s', '500us', '10m', '2h' (or a bare number in default_unit) in seconds;
    raises UsageError naming what."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value, unit = float(text), default_unit
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zµ]*)\s*", str(text).lower())
        if not m:
            raise UsageError(f"{what} {text!r} is not a number with a unit", hint="e.g. 20ms, 1.5s, 500us, 10m")
        value, unit = float(m.group(1)), m.group(2) or default_unit
    if unit not in _UNITS_S:
        raise UsageError(f"{what} {text!r}: unknown unit {unit!r}", hint="use us, ms, s, m or h")
    seconds = value * _UNITS_S[unit]
    if seconds <= 0:
        raise UsageError(f"{what} {text!r} must be positive")
    return seconds


def parse_latency_ms(text: str | float) -> float:
    """A latency budget ('20ms', '0.02s', '20000us'; bare numbers are ms) in milliseconds."""
    return parse_duration_s(text, default_unit="ms", what="latency budget") * 1e3


def parse_bytes(text: str | float) -> float:
    """'8GiB', '500MB', '1e9' in bytes; raises UsageError."""
    if isinstance(text, (int, float)):
        return float(text)
    units = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "kib": 2**10, "mib": 2**20, "gib": 2**30}
    raw = str(text).strip().lower().replace(" ", "")
    num = raw.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = raw[len(num) :]
    try:
        return float(num) * units[unit]
    except (ValueError, KeyError):
        raise UsageError(f"--max-gpu-memory {text!r} is not a size", hint="e.g. 8GiB, 500MB") from None


_RATE = re.compile(r"\s*([0-9]*\.?[0-9]+)\s*([km]?)\s*(?:/s|rps|req/s)?\s*", re.IGNORECASE)


def parse_rate_rps(text: str) -> float:
    """'20000/s', '20k/s', '1.5k', '300rps' in requests per second; raises UsageError."""
    m = _RATE.fullmatch(str(text))
    if not m:
        raise UsageError(f"--target-rate {text!r} is not a rate", hint="e.g. 20000/s, 20k/s")
    value = float(m.group(1)) * {"": 1.0, "k": 1e3, "m": 1e6}[m.group(2).lower()]
    if value <= 0:
        raise UsageError(f"--target-rate {text!r} must be positive")
    return value


def parse_percent(text: str, *, what: str = "--headroom") -> float:
    """'30%' or '0.3' as a fraction; raises UsageError."""
    raw = str(text).strip()
    try:
        value = float(raw[:-1]) / 100.0 if raw.endswith("%") else float(raw)
    except ValueError:
        raise UsageError(f"{what} {text!r} is not a percentage", hint="e.g. 30%") from None
    if value < 0:
        raise UsageError(f"{what} {text!r} must not be negative")
    return value

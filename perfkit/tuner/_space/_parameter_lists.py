"""The values users list for a config.pbtxt `parameters { key: ... }` entry (`--parameter KEY=V1,V2`,
repeatable, or the sweep's `[tune] parameters = { KEY = [V1, V2] }`), checked where the backend that
reads the key states what it takes.

Triton hands a model's `parameters` to its backend as strings (model_config.proto: ModelParameter has
one field, `string_value`). TensorRT-LLM's backend reads its engine's serving settings this way
(triton-inference-server/tensorrtllm_backend docs/model_config.md, the tensorrt_llm model's
`kv_cache_free_gpu_mem_fraction`, `batch_scheduler_policy`, `max_tokens_in_paged_kv_cache`,
`enable_chunked_context`, each `string_value`); a python-backend model reads its own from
`args["model_config"]`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from perfkit.errors import InputError

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
_HINT = "e.g. --parameter kv_cache_free_gpu_mem_fraction=0.5,0.9 (repeat the flag for another key)"


def _fraction(v: str) -> bool:
    try:
        return 0.0 < float(v) <= 1.0
    except ValueError:
        return False


def _positive_int(v: str) -> bool:
    return v.isdigit() and int(v) > 0


# What TensorRT-LLM's backend accepts for these keys, as its docs/model_config.md states them
# ("KV cache", "Optimization" and "Scheduling" tables of the tensorrt_llm model).
KNOWN_VALUES: dict[str, tuple[Callable[[str], bool], str]] = {
    "kv_cache_free_gpu_mem_fraction": (_fraction, "a fraction in (0, 1]"),
    "batch_scheduler_policy": (lambda v: v in ("max_utilization", "guaranteed_no_evict"),
                               "max_utilization or guaranteed_no_evict"),
    "max_tokens_in_paged_kv_cache": (_positive_int, "a positive integer"),
    "enable_chunked_context": (lambda v: v in ("true", "false"), "true or false"),
}  # fmt: skip


def _values(key: str, raw: Any, source: str) -> tuple[str, ...]:
    items = raw.split(",") if isinstance(raw, str) else raw if isinstance(raw, (list, tuple)) else [raw]
    values = []
    for item in items:
        text = str(item).lower() if isinstance(item, bool) else str(item)
        text = text.strip()
        if not text or ";" in text or "=" in text:
            raise InputError(
                f"{source}: parameter {key} value {item!r} must be non-empty, without ';' or '='", hint=_HINT
            )
        values.append(text)
    if not values:
        raise InputError(f"{source}: parameter {key} lists no values", hint=_HINT)
    check = KNOWN_VALUES.get(key)
    if check is not None:
        bad = [v for v in values if not check[0](v)]
        if bad:
            raise InputError(f"{source}: parameter {key} = {bad[0]!r} is not {check[1]}", hint=_HINT)
    return tuple(dict.fromkeys(values))


def parse_parameter_lists(value: Any, *, source: str = "--parameter") -> tuple[tuple[str, tuple[str, ...]], ...]:
    """'KEY=V1,V2' strings (the flag, repeated) or a {KEY: [V1, V2]} table -> ((KEY, (V1, V2)), ...),
    keys in the order given; raises InputError naming the entry."""
    if isinstance(value, Mapping):
        pairs = list(value.items())
    else:
        entries = [value] if isinstance(value, str) else list(value)
        pairs = []
        for entry in entries:
            key, sep, rest = str(entry).partition("=")
            if not sep:
                raise InputError(f"{source}: {entry!r} is not KEY=V1,V2,...", hint=_HINT)
            pairs.append((key, rest))
    out: dict[str, tuple[str, ...]] = {}
    for key, raw in pairs:
        key = str(key).strip()
        if not _KEY.match(key):
            raise InputError(f"{source}: parameter key {key!r} is not a config.pbtxt parameters key", hint=_HINT)
        if key in out:
            raise InputError(f"{source}: parameter {key} is given twice", hint="list all its values once")
        out[key] = _values(key, raw, source)
    return tuple(out.items())

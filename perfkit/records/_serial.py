"""Records to and from JSON: dataclasses to dicts and back, atomic file writes."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from perfkit.errors import InputError
from perfkit.records._machine import Machine, ModelInfo, ServerInfo

T = TypeVar("T")


def to_dict(obj: Any) -> Any:
    """Dataclasses (recursively) to JSON-ready dicts/lists."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    return obj


def from_dict(cls: type[T], data: Any) -> T:
    """Inverse of to_dict for the dataclasses of this module; raises TypeError/KeyError."""
    return typing.cast(T, _decode(cls, data))


def _decode(tp: Any, value: Any) -> Any:
    origin = typing.get_origin(tp)
    if tp in (Machine, ServerInfo, ModelInfo):
        return tp.from_mapping(value)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(value, dict):
            raise TypeError(f"{tp.__name__} expects an object, got {type(value).__name__}")
        hints = typing.get_type_hints(tp)
        kwargs = {}
        for f in dataclasses.fields(tp):
            if f.name in value:
                kwargs[f.name] = _decode(hints[f.name], value[f.name])
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise KeyError(f"{tp.__name__}.{f.name} is missing")
        return tp(**kwargs)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        non_none = [a for a in args if a is not type(None)]
        return _decode(non_none[0], value) if len(non_none) == 1 else value
    if origin is tuple:
        args = typing.get_args(tp)
        return tuple(_decode(args[0], v) for v in value) if args else tuple(value)
    if origin is list:
        return [_decode(typing.get_args(tp)[0], v) for v in value]
    if origin is dict:
        _, vt = typing.get_args(tp)
        return {k: _decode(vt, v) for k, v in value.items()}
    return value


def _renamed_key(obj: Any, old: str, new: str) -> Any:
    if isinstance(obj, dict) and old in obj and new not in obj:
        return {(new if k == old else k): v for k, v in obj.items()}
    return obj


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{what} {path} does not exist") from None
    except (OSError, ValueError) as err:
        raise InputError(f"{what} {path} is not readable JSON: {err}") from None


def _save_json(data: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=False))
    tmp.replace(path)
    return path

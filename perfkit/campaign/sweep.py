"""Sweep files: one TOML file that drives a whole campaign (server, models, load, tune, gate).

Parsed with the stdlib tomllib and checked key by key, so a mistake is reported as one
line naming the file, the key and what is expected (ConfigError, exit 3). Every relative
path in a sweep file is relative to the file's folder.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfkit.errors import ConfigError, PerfkitError
from perfkit.records import LoadLevel, ProfileSpec


def normalised(path: Path) -> Path:
    """A sweep-relative path without `dir/..` detours: `.perfkit/demo`, not `sweeps/../.perfkit/demo`."""
    return Path(os.path.normpath(path))


if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - python 3.10
    import tomli as tomllib

TOP_KEYS = ("name", "description", "server", "load", "models", "tune", "gate", "output")
SERVER_KEYS = (
    "launch_mode",
    "model_repository",
    "url",
    "grpc_url",
    "metrics_url",
    "image",
    "gpus",
    "shm_size",
    "tritonserver",
    "backend_directory",
    "startup_timeout_s",
    "env",
    "log",
    "copy_repository",
)
GATE_KEYS = (
    "baseline",
    "store",
    "thresholds",
    "job_noise",
    "confidence",
    "allow_different_load",
    "allow_different_machine",
    "max_error_fraction",
    "junit",
    "json",
)
OUTPUT_KEYS = ("dir", "store", "report")
# ProfileSpec fields a sweep may set in [load] (model and levels are built from other keys).
_SPEC_FIELDS = {
    f.name: f for f in dataclasses.fields(ProfileSpec) if f.name not in ("model", "levels", "model_version")
}
LOAD_KEYS = ("mode", "levels", "distribution", *_SPEC_FIELDS)
_CHOICES = {
    "protocol": ("http", "grpc"),
    "shared_memory": ("none", "system", "cuda"),
    "mode": ("concurrency", "request_rate"),
    "distribution": ("constant", "poisson"),
    "launch_mode": ("local", "docker", "remote"),
    "stop_rule": ("precision", "stability"),
}


@dataclass(frozen=True)
class ModelPlan:
    """One model of a campaign and the spec it is profiled with."""

    name: str
    spec: ProfileSpec


@dataclass(frozen=True)
class GatePlan:
    """The gate of a campaign: where the baseline is and how strict to be."""

    baseline: str  # a run-record file, a directory of them, or a store name
    store: Path | None = None
    thresholds: tuple[str, ...] = ()
    job_noise: tuple[str, ...] = ()  # METRIC:PCT% overrides of the gate's job-to-job noise allowance
    confidence: float = 0.95
    allow_different_load: bool = False
    allow_different_machine: bool = False
    max_error_fraction: float = 0.01
    junit: Path | None = None
    json: Path | None = None


@dataclass(frozen=True)
class Sweep:
    """A parsed, checked sweep file."""

    path: Path
    name: str
    description: str
    server: Mapping[str, Any]
    models: tuple[ModelPlan, ...]
    tune: Mapping[str, Any] | None = None
    gate: GatePlan | None = None
    output_dir: Path | None = None
    store: str | None = None  # PATH.sqlite or DIR/ (str: the trailing slash matters); None: the default
    save_to_store: bool = True
    report: bool = True
    raw: Mapping[str, Any] = field(default_factory=dict)


class _Checker:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.base = path.parent

    def fail(self, key: str, expected: str, value: Any = dataclasses.MISSING) -> PerfkitError:
        got = "" if value is dataclasses.MISSING else f", got {value!r}"
        return ConfigError(f"{self.path}: {key}: expected {expected}{got}")

    def table(self, data: Mapping[str, Any], key: str, allowed: tuple[str, ...], where: str) -> Mapping[str, Any]:
        value = data.get(key, {})
        if not isinstance(value, dict):
            raise self.fail(f"{where}{key}", "a table", value)
        unknown = sorted(set(value) - set(allowed))
        if unknown:
            raise self.fail(f"[{where}{key}].{unknown[0]}", f"one of the keys {', '.join(allowed)} (unknown key)")
        return value

    def str_(self, data: Mapping[str, Any], key: str, where: str, default: str | None = None) -> str | None:
        value = data.get(key, default)
        if value is not None and not isinstance(value, str):
            raise self.fail(f"{where}{key}", "a string", value)
        if value is not None and key in _CHOICES and value not in _CHOICES[key]:
            raise self.fail(f"{where}{key}", " or ".join(repr(c) for c in _CHOICES[key]), value)
        return value

    def number(self, data: Mapping[str, Any], key: str, where: str, *, positive: bool = True) -> float | None:
        value = data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (positive and value <= 0):
            raise self.fail(f"{where}{key}", "a positive number" if positive else "a number", value)
        return float(value)

    def bool_(self, data: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
        value = data.get(key, default)
        if not isinstance(value, bool):
            raise self.fail(f"{where}{key}", "true or false", value)
        return value

    def path_(self, data: Mapping[str, Any], key: str, where: str) -> Path | None:
        value = self.str_(data, key, where)
        return None if value is None else normalised(self.base / Path(value).expanduser())


def load_sweep(path: str | Path) -> Sweep:
    """Read and check a sweep file; raises ConfigError (exit 3) naming the file, the key, what is expected."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"sweep file {path} does not exist") from None
    except OSError as err:
        raise ConfigError(f"sweep file {path} cannot be read: {err}") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML: {err}") from None
    return parse_sweep(data, path)


def parse_sweep(data: Mapping[str, Any], path: Path) -> Sweep:
    """Check a parsed sweep mapping (see load_sweep)."""
    c = _Checker(path)
    unknown = sorted(set(data) - set(TOP_KEYS))
    if unknown:
        raise c.fail(unknown[0], f"one of the top-level keys {', '.join(TOP_KEYS)} (unknown key)")
    name = c.str_(data, "name", "", path.stem) or path.stem
    description = c.str_(data, "description", "", "") or ""
    server = _server(c, c.table(data, "server", SERVER_KEYS, ""))
    load_defaults = c.table(data, "load", LOAD_KEYS, "")
    models_raw = data.get("models")
    if not isinstance(models_raw, list) or not models_raw:
        raise c.fail("models", 'a non-empty array of tables, e.g. [[models]] name = "sleeper"', models_raw)
    models = []
    seen = set()
    for i, raw in enumerate(models_raw):
        where = f"models[{i}]"
        entry = {"name": raw} if isinstance(raw, str) else raw
        if not isinstance(entry, dict):
            raise c.fail(where, "a table with a name", entry)
        extra = sorted(set(entry) - {"name", "load"})
        if extra:
            raise c.fail(f"{where}.{extra[0]}", "only the keys name and load (unknown key)")
        model = c.str_(entry, "name", f"{where}.")
        if not model:
            raise c.fail(f"{where}.name", "the model's name")
        if model in seen:
            raise c.fail(f"{where}.name", "each model once", model)
        seen.add(model)
        override = c.table(entry, "load", LOAD_KEYS, f"{where}.")
        models.append(ModelPlan(model, _spec(c, model, {**load_defaults, **override}, f"{where}.load")))
    tune = data.get("tune")
    if isinstance(tune, str):
        tune = _tune_file(c, tune)
    if tune is not None:
        if not isinstance(tune, dict):
            raise c.fail(
                "tune", 'a table, or the path of a TOML file with a [tune] table (e.g. "tune-batcher.toml")', tune
            )
        _check_tune(c, tune, models)
    gate = _gate(c, c.table(data, "gate", GATE_KEYS, "")) if "gate" in data else None
    output = c.table(data, "output", OUTPUT_KEYS, "")
    store_value = output.get("store", None)
    if store_value is not None and not isinstance(store_value, (str, bool)):
        raise c.fail("output.store", "a store path (PATH.sqlite or DIR/) or false", store_value)
    store = None
    if isinstance(store_value, str):
        # keep a trailing slash: it marks a directory store
        store = str(normalised(c.base / store_value)) + ("/" if store_value.endswith("/") else "")
    return Sweep(
        path=path,
        name=name,
        description=description,
        server=server,
        models=tuple(models),
        tune=tune,
        gate=gate,
        output_dir=c.path_(output, "dir", "output."),
        store=store,
        save_to_store=store_value is not False,
        report=c.bool_(output, "report", "output.", True),
        raw=data,
    )


def _server(c: _Checker, s: Mapping[str, Any]) -> dict[str, Any]:
    mode = c.str_(s, "launch_mode", "server.", None) or ("remote" if s.get("url") else "local")
    out: dict[str, Any] = {"mode": mode}
    for key in ("url", "grpc_url", "metrics_url", "image", "gpus", "shm_size"):
        value = c.str_(s, key, "server.")
        if value is not None:
            out[key] = value
    for key in ("model_repository", "tritonserver", "backend_directory", "log"):
        path = c.path_(s, key, "server.")
        if path is not None:
            out[key] = path
    copy = s.get("copy_repository", False)
    if not isinstance(copy, bool):
        raise c.fail("server.copy_repository", "true or false", copy)
    out["copy_repository"] = copy
    timeout = c.number(s, "startup_timeout_s", "server.")
    if timeout is not None:
        out["startup_timeout_s"] = timeout
    env = s.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, (str, int, float)) for v in env.values()):
        raise c.fail("server.env", 'a table of strings, e.g. env = { OPENBLAS_NUM_THREADS = "1" }', env)
    out["env"] = {str(k): str(v) for k, v in env.items()}
    if mode == "remote" and "url" not in out:
        raise c.fail("server.url", 'the URL of the running server for launch_mode = "remote"')
    if mode != "remote" and "model_repository" not in out:
        raise c.fail("server.model_repository", f"the model repository folder for launch_mode = {mode!r}")
    if "model_repository" in out and mode != "remote" and not out["model_repository"].is_dir():
        raise c.fail("server.model_repository", "an existing folder", str(out["model_repository"]))
    return out


def _spec(c: _Checker, model: str, load: Mapping[str, Any], where: str) -> ProfileSpec:
    mode = c.str_(load, "mode", f"{where}.", "concurrency")
    levels_raw = load.get("levels", [1])
    if (
        not isinstance(levels_raw, list)
        or not levels_raw
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in levels_raw)
    ):
        raise c.fail(f"{where}.levels", "a non-empty list of positive numbers", levels_raw)
    if mode == "concurrency" and not all(float(v).is_integer() for v in levels_raw):
        raise c.fail(f"{where}.levels", "whole numbers for mode = 'concurrency'", levels_raw)
    dist: Any = c.str_(load, "distribution", f"{where}.", "constant") if mode == "request_rate" else None
    levels = tuple(LoadLevel(mode, float(v), dist) for v in levels_raw)  # type: ignore[arg-type]  # mode and distribution were checked against LoadMode/Distribution above
    kwargs: dict[str, Any] = {}
    for key, f in _SPEC_FIELDS.items():
        if key not in load:
            continue
        value = load[key]
        default = f.default if f.default is not dataclasses.MISSING else None
        full = f"{where}.{key}"
        if key in _CHOICES:
            kwargs[key] = c.str_(load, key, f"{where}.")
        elif key == "shapes":
            if not isinstance(value, dict) or not all(
                isinstance(v, list) and all(isinstance(d, int) for d in v) for v in value.values()
            ):
                raise c.fail(full, "a table of input name -> list of ints", value)
            kwargs[key] = {k: tuple(v) for k, v in value.items()}
        elif key == "tail_percentiles":
            if not isinstance(value, list) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 100 for v in value
            ):
                raise c.fail(full, "a list of percentiles between 0 and 100, e.g. [99, 99.9]", value)
            kwargs[key] = tuple(float(v) for v in value)
        elif isinstance(default, bool):
            kwargs[key] = c.bool_(load, key, f"{where}.", default)
        elif isinstance(default, int) or key in ("percentile", "latency_threshold_ms"):
            is_int = isinstance(default, int) and not isinstance(default, float)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise c.fail(full, "a non-negative number", value)
            if is_int and not float(value).is_integer():
                raise c.fail(full, "a whole number", value)
            kwargs[key] = int(value) if is_int else float(value)
        elif isinstance(default, float):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise c.fail(full, "a non-negative number", value)
            kwargs[key] = float(value)
        else:
            if not isinstance(value, str):
                raise c.fail(full, "a string", value)
            kwargs[key] = str(normalised(c.base / value)) if key in ("request_intervals_file",) else value
    if "input_data" in kwargs and kwargs["input_data"] not in ("random", "zero"):
        kwargs["input_data"] = str(normalised(c.base / kwargs["input_data"]))
    if kwargs.get("percentile") is not None and not 0 < kwargs["percentile"] < 100:
        raise c.fail(f"{where}.percentile", "a percentile between 0 and 100", kwargs["percentile"])
    try:
        return ProfileSpec(model=model, levels=levels, **kwargs)
    except (TypeError, ValueError) as err:
        raise c.fail(where, f"valid load settings ({err})") from None


def _gate(c: _Checker, g: Mapping[str, Any]) -> GatePlan:
    baseline = c.str_(g, "baseline", "gate.")
    if not baseline:
        raise c.fail("gate.baseline", "a run-record file, a directory of run records, or a store name")
    looks_like_path = baseline.endswith((".json", "/")) or "/" in baseline or (c.base / baseline).exists()
    thresholds = g.get("thresholds", [])
    if not isinstance(thresholds, list) or not all(isinstance(t, str) for t in thresholds):
        raise c.fail("gate.thresholds", 'a list of strings like "throughput:-5%"', thresholds)
    from perfkit.gate import parse_job_noise, parse_threshold  # noqa: PLC0415  (campaign sits above gate)

    for t in thresholds:
        try:
            parse_threshold(t)
        except PerfkitError as err:
            raise c.fail("gate.thresholds", f"METRIC:CHANGE ({err.message})", t) from None
    job_noise = g.get("job_noise", [])
    if not isinstance(job_noise, list) or not all(isinstance(t, str) for t in job_noise):
        raise c.fail("gate.job_noise", 'a list of strings like "p99:5%"', job_noise)
    try:
        parse_job_noise(job_noise)
    except PerfkitError as err:
        raise c.fail("gate.job_noise", f"METRIC:PERCENT% ({err.message})", job_noise) from None
    confidence = c.number(g, "confidence", "gate.")
    if confidence is not None and not 0.5 <= confidence < 1:
        raise c.fail("gate.confidence", "a number in [0.5, 1)", confidence)
    max_err = c.number(g, "max_error_fraction", "gate.", positive=False)
    store = c.str_(g, "store", "gate.")
    return GatePlan(
        baseline=str(normalised(c.base / baseline)) if looks_like_path else baseline,
        store=normalised(c.base / store) if store else None,
        thresholds=tuple(thresholds),
        job_noise=tuple(job_noise),
        confidence=confidence or 0.95,
        allow_different_load=c.bool_(g, "allow_different_load", "gate.", False),
        allow_different_machine=c.bool_(g, "allow_different_machine", "gate.", False),
        max_error_fraction=0.01 if max_err is None else max_err,
        junit=c.path_(g, "junit", "gate."),
        json=c.path_(g, "json", "gate."),
    )


def _tune_file(c: _Checker, name: str) -> dict[str, Any]:
    path = c.base / name
    try:
        table = tomllib.loads(path.read_text()).get("tune")
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise c.fail("tune", "a readable TOML file with a [tune] table", f"{name} ({err})") from None
    if not isinstance(table, dict):
        raise c.fail("tune", "a TOML file with a [tune] table", name)
    return table


def _check_tune(c: _Checker, tune: Mapping[str, Any], models: list[ModelPlan]) -> None:
    """Let the tuner check its own table now, before any server starts (its errors become ConfigError)."""
    from perfkit.tuner import SETTINGS_KEYS, TuneSettings, TuneSpace  # noqa: PLC0415

    source = f"{c.path}: [tune]"
    only = tune.get("models")
    names = [m.name for m in models]
    if only is not None and (not isinstance(only, list) or not all(isinstance(m, str) and m in names for m in only)):
        raise c.fail("tune.models", f"a list of the sweep's models ({', '.join(names)})", only)
    try:
        TuneSpace.from_mapping(tune, source=source, ignore=(*SETTINGS_KEYS, "models"))
        TuneSettings.from_mapping(names[0], tune, source=source)
    except PerfkitError as err:
        message = err.message if err.message.startswith(str(c.path)) else f"{source}: {err.message}"
        raise ConfigError(message, hint=err.hint) from None

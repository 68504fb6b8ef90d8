"""The search space: what the user asks to search (TuneSpace), what applies to one model
(ResolvedSpace), and how a point of the space becomes a config (apply) and back (extract).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfkit.errors import InputError, UsageError
from perfkit.server.modelconfig import ModelConfig

PREFERRED_CHOICES = ("none", "max", "pow2")
# Triton batches up to max_batch_size when no preferred size is set: "none" and "max" behave
# alike (and the server reports [max_batch_size] for "none"), so only one is searched by default.
DEFAULT_PREFERRED = ("none", "pow2")
KINDS = {"cpu": "KIND_CPU", "gpu": "KIND_GPU"}
DEFAULT_PRECISIONS = ("fp32", "fp16")
DEFAULT_INSTANCE_COUNTS = (1, 2, 3, 4)
TRT_PRECISION_MODE = {"fp32": "FP32", "fp16": "FP16", "int8": "INT8"}
# Backends that run on both CPU and GPU (instance kind is a real choice there when a GPU exists).
_BOTH_KINDS = {"onnxruntime", "pytorch", "tensorflow", "python"}
_TRT_EP_BACKENDS = {"onnxruntime", "tensorflow"}

# Parameter names: Optuna params, CSV columns and TrialRecord.params keys.
P_MBS = "max_batch_size"
P_DB = "dynamic_batching"
P_DELAY = "max_queue_delay_us"
P_PREF = "preferred_batch_sizes"
P_COUNT = "instance_count"
P_KIND = "instance_kind"
P_PREC = "precision"
PARAM_ORDER = (P_MBS, P_DB, P_DELAY, P_PREF, P_COUNT, P_KIND, P_PREC)


def _int_tuple(value: Any, key: str, source: str) -> tuple[int, ...]:
    items: Any = value.split(",") if isinstance(value, str) else value
    if isinstance(items, (int, float)) and not isinstance(items, bool):
        items = [items]
    try:
        out = tuple(int(str(v).strip()) for v in items)
    except (TypeError, ValueError):
        raise InputError(f"{source}: {key} = {value!r} is not a list of integers", hint="e.g. 1,2,4,8") from None
    if not out or any(v < 0 for v in out):
        raise InputError(f"{source}: {key} = {value!r} must list integers >= 0", hint="e.g. 1,2,4,8")
    return tuple(sorted(set(out)))


def _str_tuple(value: Any, key: str, source: str) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not items:
        raise InputError(f"{source}: {key} = {value!r} is not a list of names", hint="e.g. fp32,fp16")
    out = tuple(str(v).strip().lower() for v in items if str(v).strip())
    if not out:
        raise InputError(f"{source}: {key} = {value!r} is empty")
    return tuple(dict.fromkeys(out))


def parse_delay_range(value: Any, *, source: str = "--queue-delays-us") -> tuple[int, int]:
    """'LOW:HIGH' (log-scale range), 'N' (one value) or [LOW, HIGH], in microseconds; raises InputError."""
    if isinstance(value, str):
        parts = value.split(":")
    elif isinstance(value, (list, tuple)):
        parts = [str(v) for v in value]
    else:
        parts = [str(value)]
    try:
        nums = [int(float(p)) for p in parts]
    except ValueError:
        raise InputError(f"{source}: {value!r} is not LOW:HIGH microseconds", hint="e.g. 100:10000") from None
    if len(nums) == 1:
        nums = nums * 2
    if len(nums) != 2 or nums[0] < 0 or nums[1] < nums[0]:
        raise InputError(f"{source}: {value!r} is not LOW:HIGH with 0 <= LOW <= HIGH", hint="e.g. 100:10000")
    return nums[0], nums[1]


def _tri_state(value: Any, key: str, source: str) -> tuple[bool, ...] | None:
    if isinstance(value, bool):
        return (value,)
    text = str(value).strip().lower()
    if text in ("search", "both", "auto"):
        return None
    if text in ("on", "true", "yes"):
        return (True,)
    if text in ("off", "false", "no"):
        return (False,)
    raise InputError(f'{source}: {key} = {value!r} must be true, false or "search"')


@dataclass(frozen=True)
class TuneSpace:
    """What to search. None in a field: the default for the model (see resolve); a tuple:
    exactly these values (the original config's value is always added, so trial 0 fits)."""

    max_batch_sizes: tuple[int, ...] | None = None
    dynamic_batching: tuple[bool, ...] | None = None
    queue_delay_us: tuple[int, int] | None = None
    preferred_batch_sizes: tuple[str, ...] | None = None
    instance_counts: tuple[int, ...] | None = None
    instance_kinds: tuple[str, ...] | None = None
    precisions: tuple[str, ...] | None = None
    precision_parameter: str = "precision"

    KEYS = (
        "max_batch_sizes",
        "dynamic_batching",
        "queue_delays_us",
        "preferred_batch_sizes",
        "instance_counts",
        "instance_kinds",
        "precisions",
        "precision_parameter",
    )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, source: str = "[tune]", ignore: Sequence[str] = ()) -> TuneSpace:
        """Build from a sweep file's [tune] table (or any dict). Keys: max_batch_sizes = [1,2,4],
        dynamic_batching = true|false|"search", queue_delays_us = "100:10000" or [100, 10000],
        preferred_batch_sizes = ["none","max","pow2"], instance_counts = [1,2], instance_kinds =
        ["cpu","gpu"], precisions = ["fp32","fp16"], precision_parameter = "precision".
        Keys in `ignore` (the tuner's settings, e.g. latency_budget) are skipped; any other
        unknown key raises InputError naming it."""
        unknown = sorted(set(data) - set(cls.KEYS) - set(ignore))
        if unknown:
            raise InputError(
                f"{source}: unknown key(s) {', '.join(unknown)}", hint=f"known: {', '.join(cls.KEYS + tuple(ignore))}"
            )
        kw: dict[str, Any] = {}
        if "max_batch_sizes" in data:
            kw["max_batch_sizes"] = _int_tuple(data["max_batch_sizes"], "max_batch_sizes", source)
        if "dynamic_batching" in data:
            kw["dynamic_batching"] = _tri_state(data["dynamic_batching"], "dynamic_batching", source)
        if "queue_delays_us" in data:
            kw["queue_delay_us"] = parse_delay_range(data["queue_delays_us"], source=f"{source} queue_delays_us")
        if "preferred_batch_sizes" in data:
            pref = _str_tuple(data["preferred_batch_sizes"], "preferred_batch_sizes", source)
            bad = [p for p in pref if p not in PREFERRED_CHOICES]
            if bad:
                raise InputError(
                    f"{source}: preferred_batch_sizes {bad} unknown", hint=f"choose from {', '.join(PREFERRED_CHOICES)}"
                )
            kw["preferred_batch_sizes"] = pref
        if "instance_counts" in data:
            counts = _int_tuple(data["instance_counts"], "instance_counts", source)
            if 0 in counts:
                raise InputError(f"{source}: instance_counts must be >= 1")
            kw["instance_counts"] = counts
        if "instance_kinds" in data:
            kinds = _str_tuple(data["instance_kinds"], "instance_kinds", source)
            kinds = tuple(k.removeprefix("kind_") for k in kinds)
            bad = [k for k in kinds if k not in KINDS]
            if bad:
                raise InputError(f"{source}: instance_kinds {bad} unknown", hint="choose from cpu, gpu")
            kw["instance_kinds"] = kinds
        if "precisions" in data:
            kw["precisions"] = _str_tuple(data["precisions"], "precisions", source)
        if "precision_parameter" in data:
            kw["precision_parameter"] = str(data["precision_parameter"])
        return cls(**kw)


@dataclass(frozen=True)
class Dimension:
    """One searched parameter: categorical choices, or a log-scale integer range."""

    name: str
    choices: tuple[Any, ...] = ()
    low: int | None = None
    high: int | None = None
    when_dynamic_batching: bool = False  # only sampled when dynamic batching is on

    @property
    def is_range(self) -> bool:
        return self.low is not None

    def describe(self) -> str:
        if self.is_range:
            return f"{self.name} {self.low}..{self.high} (log)"
        return f"{self.name} {{{', '.join(map(str, self.choices))}}}"

    def size(self) -> int:
        return len(self.choices) if not self.is_range else 8  # a range counts as ~8 distinct values


@dataclass(frozen=True)
class ResolvedSpace:
    """The dimensions that apply to one model, and the model facts they came from."""

    model: str
    backend: str  # python, onnxruntime, tensorflow, tensorrt, pytorch, ...
    precision_via: str  # "parameter", "trt_accelerator", "engine_file" or "" (not searched)
    dimensions: tuple[Dimension, ...]
    original_params: dict[str, Any]
    engine_files: dict[str, str] = field(default_factory=dict)  # precision -> file (TensorRT plans)
    precision_parameter: str = "precision"
    notes: tuple[str, ...] = ()

    def dimension(self, name: str) -> Dimension | None:
        return next((d for d in self.dimensions if d.name == name), None)

    def grid_size(self) -> int:
        """How many distinct configs the space holds (ranges counted as ~8 values)."""
        fixed = 1
        cond = 1
        for d in self.dimensions:
            if d.name == P_DB:
                continue
            if d.when_dynamic_batching:
                cond *= d.size()
            else:
                fixed *= d.size()
        db = self.dimension(P_DB)
        if db is None:
            return fixed * (cond if self.original_params.get(P_DB) else 1)
        return fixed * sum(cond if on else 1 for on in db.choices)


def grid_points(space: ResolvedSpace, range_points: int = 4) -> dict[str, list[Any]]:
    """Every dimension as a list of values (ranges as log-spaced integers) for a grid search."""
    grid: dict[str, list[Any]] = {}
    for d in space.dimensions:
        if d.is_range:
            assert d.low is not None and d.high is not None
            if d.low == d.high:
                grid[d.name] = [d.low]
            else:
                ratio = (d.high / d.low) ** (1 / (range_points - 1))
                grid[d.name] = sorted({int(round(d.low * ratio**i)) for i in range(range_points)})
        else:
            grid[d.name] = list(d.choices)
    return grid


def backend_of(cfg: ModelConfig, model_dir: Path) -> str:
    """The backend serving a model, from backend/platform or, failing those, the files."""
    if cfg.backend:
        return cfg.backend
    platform = cfg.platform
    for prefix, backend in (
        ("onnxruntime", "onnxruntime"),
        ("tensorrt", "tensorrt"),
        ("tensorflow", "tensorflow"),
        ("pytorch", "pytorch"),
        ("ensemble", "ensemble"),
    ):
        if platform.startswith(prefix):
            return backend
    version_dir = _version_dir(cfg, model_dir)
    names = [p.name for p in version_dir.iterdir()] if version_dir and version_dir.is_dir() else []
    for suffix, backend in ((".onnx", "onnxruntime"), (".plan", "tensorrt"), (".py", "python"), (".pt", "pytorch")):
        if any(n.endswith(suffix) for n in names):
            return backend
    if any(n.endswith(".savedmodel") or n.endswith(".graphdef") for n in names):
        return "tensorflow"
    return "unknown"


def _version_dir(cfg: ModelConfig, model_dir: Path) -> Path | None:
    versions = sorted((int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()), reverse=True)
    if cfg.version_policy.HasField("specific") and cfg.version_policy.specific.versions:
        wanted = max(cfg.version_policy.specific.versions)
        return model_dir / str(wanted)
    return model_dir / str(versions[0]) if versions else None


def _precision_label(filename: str) -> str:
    low = filename.lower()
    for label in ("int8", "fp16", "bf16", "tf32", "fp32"):
        if label in low:
            return label
    return "fp32"


def _engine_files(cfg: ModelConfig, model_dir: Path) -> dict[str, str]:
    """TensorRT engines in the served version folder, by precision (from the file name)."""
    version_dir = _version_dir(cfg, model_dir)
    if version_dir is None or not version_dir.is_dir():
        return {}
    current = cfg.default_model_filename or "model.plan"
    found: dict[str, str] = {}
    if (version_dir / current).is_file():
        found[_precision_label(current)] = current
    for p in sorted(version_dir.glob("*.plan")):
        found.setdefault(_precision_label(p.name), p.name)
    return found


def _trt_accelerator(cfg: ModelConfig) -> Any | None:
    for acc in cfg.optimization.execution_accelerators.gpu_execution_accelerator:
        if acc.name == "tensorrt":
            return acc
    return None


def extract_params(
    cfg: ModelConfig,
    *,
    backend: str,
    precision_parameter: str = "precision",
    engine_files: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The tuner's parameters as a config holds them (the inverse of apply_params)."""
    out: dict[str, Any] = {P_MBS: int(cfg.max_batch_size)}
    has_db = cfg.HasField("dynamic_batching")
    out[P_DB] = has_db
    if has_db:
        db = cfg.dynamic_batching
        out[P_DELAY] = int(db.max_queue_delay_microseconds)
        pref = list(db.preferred_batch_size)
        mbs = int(cfg.max_batch_size)
        if not pref:
            out[P_PREF] = "none"
        elif pref == [mbs]:
            out[P_PREF] = "max"
        elif pref == _pow2_sizes(mbs):
            out[P_PREF] = "pow2"
        else:
            out[P_PREF] = "custom:" + ",".join(map(str, pref))
    groups = list(cfg.instance_group)
    out[P_COUNT] = int(groups[0].count or 1) if groups else 1
    if groups:
        out[P_KIND] = {1: "gpu", 2: "cpu"}.get(int(groups[0].kind), "auto")
    else:
        out[P_KIND] = "auto"
    if backend in _TRT_EP_BACKENDS:
        acc = _trt_accelerator(cfg)
        if acc is None:
            out[P_PREC] = "none"
        else:
            mode = acc.parameters.get("precision_mode", "FP32").lower()
            out[P_PREC] = mode
    elif backend == "tensorrt":
        files = engine_files or {}
        current = cfg.default_model_filename or "model.plan"
        out[P_PREC] = next((p for p, f in files.items() if f == current), _precision_label(current))
    elif precision_parameter in cfg.parameters:
        out[P_PREC] = cfg.parameters[precision_parameter].string_value.lower()
    return out


def _pow2_sizes(mbs: int) -> list[int]:
    """Preferred sizes 'pow2': every power of two from 2 up to mbs, and mbs itself."""
    sizes = [2**i for i in range(1, 31) if 2**i <= mbs]
    if mbs not in sizes and mbs >= 1:
        sizes.append(mbs)
    return sizes


def _default_mbs_choices(mbs: int) -> tuple[int, ...]:
    choices = {2**i for i in range(0, 31) if 2**i <= mbs}
    choices.add(mbs)
    return tuple(sorted(choices))


def resolve(
    space: TuneSpace,
    cfg: ModelConfig,
    model_dir: Path,
    *,
    latency_budget_us: float,
    gpu_available: bool = False,
) -> ResolvedSpace:
    """The dimensions that apply to this model (defaults filled in, original values added).

    Raises UsageError for what cannot be tuned (an ensemble) or flags that contradict the model.
    """
    name = cfg.name or model_dir.name
    backend = backend_of(cfg, model_dir)
    if backend == "ensemble" or cfg.HasField("ensemble_scheduling"):
        raise UsageError(
            f"model {name!r} is an ensemble: it has no instances or batcher of its own",
            hint="tune its composing models one by one",
        )
    engines = _engine_files(cfg, model_dir) if backend == "tensorrt" else {}
    orig = extract_params(cfg, backend=backend, precision_parameter=space.precision_parameter, engine_files=engines)
    dims: list[Dimension] = []
    notes: list[str] = []
    mbs = int(cfg.max_batch_size)
    sequence = cfg.HasField("sequence_batching")

    # max_batch_size: 0 means the model takes no batch dimension; it stays 0.
    if mbs > 0:
        choices = space.max_batch_sizes or _default_mbs_choices(mbs)
        if 0 in choices:
            raise UsageError(f"--max-batch-sizes: 0 would remove the batch dimension of {name!r}; use sizes >= 1")
        dims.append(Dimension(P_MBS, tuple(sorted(set(choices) | {mbs}))))
    elif space.max_batch_sizes:
        notes.append(f"max_batch_size not searched: {name!r} has max_batch_size 0 (no batch dimension)")

    # Dynamic batching and its knobs: only for batching models without a sequence batcher.
    if mbs > 0 and not sequence:
        db_choices = space.dynamic_batching if space.dynamic_batching is not None else (True, False)
        db_choices = tuple(dict.fromkeys((*db_choices, orig[P_DB])))
        if len(db_choices) > 1:
            dims.append(Dimension(P_DB, tuple(sorted(db_choices, reverse=True))))
        if True in db_choices:
            low, high = space.queue_delay_us or (50, int(max(200, min(latency_budget_us / 2, 50_000))))
            if orig.get(P_DELAY):
                low, high = min(low, orig[P_DELAY]), max(high, orig[P_DELAY])
            low = max(low, 1)  # log scale: 0 is "no delay", represented by the range's low end
            dims.append(Dimension(P_DELAY, low=low, high=max(high, low), when_dynamic_batching=True))
            pref = space.preferred_batch_sizes or DEFAULT_PREFERRED
            if orig.get(P_PREF) in PREFERRED_CHOICES:
                pref = tuple(dict.fromkeys((*pref, orig[P_PREF])))
            dims.append(Dimension(P_PREF, tuple(pref), when_dynamic_batching=True))
    elif space.dynamic_batching and True in space.dynamic_batching:
        why = "has max_batch_size 0" if mbs == 0 else "uses the sequence batcher"
        notes.append(f"dynamic batching not searched: {name!r} {why}")

    counts = space.instance_counts or DEFAULT_INSTANCE_COUNTS
    dims.append(Dimension(P_COUNT, tuple(sorted(set(counts) | {orig[P_COUNT]}))))

    kinds_ok = backend in _BOTH_KINDS and gpu_available
    if space.instance_kinds is not None:
        kinds = space.instance_kinds
        if "gpu" in kinds and not gpu_available:
            notes.append("instance kind gpu requested but no GPU was found; trials with it will fail to load")
    elif kinds_ok:
        kinds = ("gpu", "cpu")
    else:
        kinds = ()
    if len(cfg.instance_group) > 1 and kinds:
        notes.append("instance kind not searched: the model has several instance groups")
        kinds = ()
    if kinds:
        kind_choices = tuple(dict.fromkeys((*kinds, orig[P_KIND])))
        if len(kind_choices) > 1:
            dims.append(Dimension(P_KIND, kind_choices))

    precision_via = ""
    precisions = space.precisions
    if backend == "tensorrt":
        precision_via = "engine_file"
        available = tuple(engines)
        wanted = precisions or available
        missing = [p for p in wanted if p not in engines]
        if missing:
            notes.append(f"no engine file for precision {', '.join(missing)} in {name!r}: not searched")
        prec_choices = tuple(p for p in wanted if p in engines)
    elif backend in _TRT_EP_BACKENDS:
        if gpu_available or precisions:
            precision_via = "trt_accelerator"
            prec_choices = precisions or ("none", *DEFAULT_PRECISIONS)
            bad = [p for p in prec_choices if p != "none" and p not in TRT_PRECISION_MODE]
            if bad:
                raise UsageError(f"--precisions {','.join(bad)}: TensorRT accelerator takes fp32, fp16, int8 (or none)")
        else:
            prec_choices = ()
            notes.append("precision not searched: the TensorRT accelerator needs a GPU and none was found")
    elif space.precision_parameter in cfg.parameters or precisions:
        precision_via = "parameter"
        prec_choices = precisions or DEFAULT_PRECISIONS
    else:
        prec_choices = ()
    if precision_via and P_PREC in orig:
        prec_choices = tuple(dict.fromkeys((*prec_choices, orig[P_PREC])))
    if precision_via and len(prec_choices) > 1:
        dims.append(Dimension(P_PREC, prec_choices))
    elif not precision_via:
        precision_via = ""
    return ResolvedSpace(
        model=name,
        backend=backend,
        precision_via=precision_via,
        dimensions=tuple(dims),
        original_params=orig,
        engine_files=engines,
        precision_parameter=space.precision_parameter,
        notes=tuple(notes),
    )


def apply_params(original: ModelConfig, params: Mapping[str, Any], space: ResolvedSpace) -> ModelConfig:
    """A copy of the original config with the given parameters set; other fields untouched."""
    cfg = ModelConfig()
    cfg.CopyFrom(original)
    if P_MBS in params:
        cfg.max_batch_size = int(params[P_MBS])
    mbs = int(cfg.max_batch_size)
    db_on = params.get(P_DB, cfg.HasField("dynamic_batching"))
    if P_DB in params and not db_on:
        cfg.ClearField("dynamic_batching")
    elif db_on:
        db = cfg.dynamic_batching
        db.SetInParent()
        if P_DELAY in params:
            db.max_queue_delay_microseconds = int(params[P_DELAY])
        pref = params.get(P_PREF)
        if pref is not None or P_MBS in params:
            if pref is None:
                # The original's own sizes: keep those that still fit the new max_batch_size.
                keep = [s for s in db.preferred_batch_size if s <= mbs]
            elif pref == "none":
                keep = []
            elif pref == "max":
                keep = [mbs]
            elif pref == "pow2":
                keep = _pow2_sizes(mbs)
            elif str(pref).startswith("custom:"):
                keep = [int(s) for s in str(pref)[7:].split(",") if s and int(s) <= mbs]
            else:
                raise UsageError(f"preferred_batch_sizes {pref!r} unknown")
            del db.preferred_batch_size[:]
            db.preferred_batch_size.extend(keep)
    if P_COUNT in params or P_KIND in params:
        if not cfg.instance_group:
            cfg.instance_group.add()
        for group in cfg.instance_group:
            if P_COUNT in params:
                group.count = int(params[P_COUNT])
        if P_KIND in params and params[P_KIND] in KINDS and len(cfg.instance_group) == 1:
            group = cfg.instance_group[0]
            group.kind = ModelConfig.InstanceGroup.Kind.Value(KINDS[params[P_KIND]])  # type: ignore[attr-defined]
            if params[P_KIND] == "cpu":
                del group.gpus[:]
    if P_PREC in params and space.precision_via:
        _apply_precision(cfg, str(params[P_PREC]), space)
    return cfg


def _apply_precision(cfg: ModelConfig, precision: str, space: ResolvedSpace) -> None:
    if space.precision_via == "parameter":
        cfg.parameters[space.precision_parameter].string_value = precision
    elif space.precision_via == "engine_file":
        cfg.default_model_filename = space.engine_files[precision]
    elif space.precision_via == "trt_accelerator":
        accs = cfg.optimization.execution_accelerators.gpu_execution_accelerator
        existing = [a for a in accs if a.name == "tensorrt"]
        if precision == "none":
            for acc in existing:
                accs.remove(acc)
            if not accs and not cfg.optimization.execution_accelerators.cpu_execution_accelerator:
                cfg.optimization.ClearField("execution_accelerators")
            if cfg.HasField("optimization") and not cfg.optimization.ListFields():
                cfg.ClearField("optimization")
            return
        acc = existing[0] if existing else accs.add(name="tensorrt")
        acc.parameters["precision_mode"] = TRT_PRECISION_MODE[precision]


def normalize_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """Params in a canonical form (delay rounded, keys in a fixed order) for records and CSV."""
    out: dict[str, Any] = {}
    for key in PARAM_ORDER:
        if key in params:
            value = params[key]
            if key == P_DELAY:
                value = int(round(float(value)))
            out[key] = value
    return out


def log_clamp(value: float, low: int, high: int) -> int:
    """A delay clamped into a log range (0 maps to its low end)."""
    if value <= 0 or not math.isfinite(value):
        return low
    return int(min(max(value, low), high))

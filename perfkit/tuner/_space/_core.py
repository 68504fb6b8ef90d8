"""The vocabulary of the search space: what the user asks to search (TuneSpace), one searched
parameter (Dimension), what applies to one model (ResolvedSpace), and the parameter names.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perfkit.errors import InputError
from perfkit.tuner._space._parameter_lists import parse_parameter_lists
from perfkit.tuner._validate import Context

PREFERRED_CHOICES = ("none", "max", "pow2")
_QUEUE_TIMEOUT = re.compile(r"none|(reject|delay):[1-9]\d*")  # the queue_timeout knob's labels
# Triton batches up to max_batch_size when no preferred size is set: "none" and "max" behave
# alike (and the server reports [max_batch_size] for "none"), so only one is searched by default.
DEFAULT_PREFERRED = ("none", "pow2")
KINDS = {"cpu": "KIND_CPU", "gpu": "KIND_GPU"}
DEFAULT_PRECISIONS = ("fp32", "fp16")
# Instance counts before the machine's bound applies (kept for callers that import it).
DEFAULT_INSTANCE_COUNTS = (1, 2, 3, 4)
# max_batch_size is explored by doubling up to this when the model allows any batch size
# (model_analyzer's default ceiling is 128 as well); --max-batch-size-limit changes it.
DEFAULT_MAX_BATCH_SIZE_LIMIT = 128
# Instances per GPU searched at most: Triton's instance_group count is per listed GPU, and past
# a few instances a GPU only time-slices the same SMs.
GPU_INSTANCES_PER_GPU = 4
# Python models that wait (I/O, sleeps, a remote call) gain past the core count: never bound
# CPU instance counts below this.
MIN_CPU_INSTANCE_BOUND = 4
TRT_PRECISION_MODE = {"fp32": "FP32", "fp16": "FP16", "bf16": "BF16", "int8": "INT8"}
# `perfkit profile` sends sequences (correlation IDs, start/end flags; closed loop: one sequence
# per concurrency slot) and measures decoupled models' response streams, so both are tuned.
# Turning one off again refuses those models up front and shows their knobs as not measurable.
SEQUENCE_MEASURABLE = True
DECOUPLED_MEASURABLE = True

# Parameter names: Optuna params, CSV columns and TrialRecord.params keys.
P_MBS = "max_batch_size"
P_DB = "dynamic_batching"
P_DELAY = "max_queue_delay_us"
P_PREF = "preferred_batch_sizes"
P_COUNT = "instance_count"
P_KIND = "instance_kind"
P_PREC = "precision"
P_SEQ_STRATEGY = "sequence_strategy"
P_SEQ_IDLE = "max_sequence_idle_us"
P_SEQ_DELAY = "sequence_max_queue_delay_us"
P_SEQ_CANDIDATES = "max_candidate_sequences"
P_SEQ_PREF = "sequence_preferred_batch_sizes"
PARAM_ORDER = (
    P_MBS,
    P_DB,
    P_DELAY,
    P_PREF,
    P_COUNT,
    P_KIND,
    P_PREC,
    P_SEQ_STRATEGY,
    P_SEQ_IDLE,
    P_SEQ_DELAY,
    P_SEQ_CANDIDATES,
    P_SEQ_PREF,
)


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


def parse_trt_engines(value: Any, *, source: str = "--trt-engines") -> tuple[tuple[str, str], ...]:
    """'fp32=model.plan,fp16=model_fp16.plan' (or a TOML table) as (precision, file) pairs; raises InputError."""
    if isinstance(value, Mapping):
        items = [f"{k}={v}" for k, v in value.items()]
    elif isinstance(value, str):
        items = [v for v in value.split(",") if v.strip()]
    else:
        items = [str(v) for v in value]
    out: dict[str, str] = {}
    for item in items:
        prec, sep, name = item.partition("=")
        prec, name = prec.strip().lower(), name.strip()
        if not sep or not prec or not name or "/" in name:
            raise InputError(
                f"{source}: {item!r} is not PRECISION=ENGINE_FILE", hint="e.g. fp32=model.plan,fp16=model_fp16.plan"
            )
        out[prec] = name
    return tuple(out.items())


def parse_fixed(value: Any, *, source: str = "--fix") -> tuple[tuple[str, str], ...]:
    """'knob=value,knob=value' (or a TOML table) as (knob, value text) pairs; raises InputError.
    The knob names are checked against the registry when the space resolves."""
    items = [f"{k}={v}" for k, v in value.items()] if isinstance(value, Mapping) else str(value).split(",")
    out: dict[str, str] = {}
    for item in (i.strip() for i in items if i.strip()):
        name, sep, text = item.partition("=")
        if not sep or not name.strip() or not text.strip():
            raise InputError(f"{source}: {item!r} is not KNOB=VALUE", hint="e.g. sequence_strategy=oldest")
        out[name.strip()] = text.strip()
    return tuple(out.items())


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
    max_batch_size_limit: int | None = None
    trt_engines: tuple[tuple[str, str], ...] = ()  # (precision, engine file) the user declares
    parameters: tuple[tuple[str, tuple[str, ...]], ...] = ()  # config.pbtxt parameters: (key, values)
    intra_op_threads: tuple[int, ...] | None = None  # a backend's intra-op thread counts (_knob_backend)
    inter_op_threads: tuple[int, ...] | None = None
    # knob -> the one value candidates have (--fix sequence_strategy=oldest): any knob, as text
    fixed: tuple[tuple[str, str], ...] = ()
    max_queue_sizes: tuple[int, ...] | None = None  # the queue policy's bound (0: unbounded)
    queue_timeouts: tuple[str, ...] | None = None  # none, reject:US or delay:US
    rate_limit_priorities: tuple[int, ...] | None = None  # 0: no rate limiter claim
    # The other models served with this one on the same server (a traffic mix, set by the mix
    # subject, not a user key): what the rate limiter knob arbitrates between.
    shared_with: tuple[str, ...] = ()

    # The keys of a [tune] table's space, and the names of `perfkit tune`'s space flags' parameters
    # (cli/_tune_options.py reads this list): a knob users may bound adds its key here once.
    KEYS = (
        "max_batch_sizes",
        "dynamic_batching",
        "queue_delays_us",
        "preferred_batch_sizes",
        "instance_counts",
        "instance_kinds",
        "precisions",
        "precision_parameter",
        "max_batch_size_limit",
        "trt_engines",
        "parameters",
        "intra_op_threads",
        "inter_op_threads",
        "fix",
        "max_queue_sizes",
        "queue_timeouts",
        "rate_limit_priorities",
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
        if data.get("max_batch_size_limit") is not None:
            limit = _int_tuple(data["max_batch_size_limit"], "max_batch_size_limit", source)
            if len(limit) != 1 or limit[0] < 1:
                raise InputError(
                    f"{source}: max_batch_size_limit = {data['max_batch_size_limit']!r} must be one integer >= 1"
                )
            kw["max_batch_size_limit"] = limit[0]
        if "rate_limit_priorities" in data:
            kw["rate_limit_priorities"] = _int_tuple(data["rate_limit_priorities"], "rate_limit_priorities", source)
        if data.get("trt_engines"):
            kw["trt_engines"] = parse_trt_engines(data["trt_engines"], source=source)
        if data.get("parameters"):
            kw["parameters"] = parse_parameter_lists(data["parameters"], source=f"{source} parameters")
        if data.get("fix"):
            kw["fixed"] = parse_fixed(data["fix"], source=f"{source} fix")
        for key in ("intra_op_threads", "inter_op_threads"):
            if key in data:
                threads = _int_tuple(data[key], key, source)
                if 0 in threads:
                    raise InputError(f"{source}: {key} must be >= 1 (0 is the backend's default: leave it unset)")
                kw[key] = threads
        if "max_queue_sizes" in data:
            kw["max_queue_sizes"] = _int_tuple(data["max_queue_sizes"], "max_queue_sizes", source)
        if "queue_timeouts" in data:
            timeouts = _str_tuple(data["queue_timeouts"], "queue_timeouts", source)
            bad = [t for t in timeouts if not _QUEUE_TIMEOUT.fullmatch(t)]
            if bad:
                raise InputError(
                    f"{source}: queue_timeouts {bad} unknown",
                    hint="give none, reject:MICROSECONDS or delay:MICROSECONDS",
                )
            kw["queue_timeouts"] = timeouts
        return cls(**kw)


@dataclass(frozen=True)
class Dimension:
    """One searched parameter: categorical choices, or a log-scale integer range."""

    name: str
    choices: tuple[Any, ...] = ()
    low: int | None = None
    high: int | None = None
    when_dynamic_batching: bool = False  # only sampled when dynamic batching is on
    # Only sampled when the instances are not KIND_CPU (a GPU accelerator's precision: ONNX
    # Runtime and TensorFlow ignore it on CPU instances, so there it would be a no-op point).
    when_gpu_kind: bool = False

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
    parameter_keys: tuple[str, ...] = ()  # the config.pbtxt parameters searched (--parameter)
    notes: tuple[str, ...] = ()
    # knob -> why it is or is not searched for this model, backend and machine (for --dry-run)
    reasons: dict[str, str] = field(default_factory=dict)
    # knobs that apply to this model but cannot be measured yet (shown, never sampled)
    unmeasurable: tuple[Dimension, ...] = ()
    gpus: int = 0
    cpu_cores: int = 1
    refused: str | None = None  # why the model cannot be tuned (resolve(refuse=False) only)
    validation: Context | None = None  # what the validator checks candidates against

    def dimension(self, name: str) -> Dimension | None:
        return next((d for d in self.dimensions if d.name == name), None)

    def applies(self, d: Dimension, params: Mapping[str, Any]) -> bool:
        """Whether a conditional dimension is sampled given the values chosen before it (the
        original's where its dimension is not searched)."""

        def chosen(name: str) -> Any:
            return params.get(name) if self.dimension(name) is not None else self.original_params.get(name)

        if d.when_dynamic_batching and not chosen(P_DB):
            return False
        return not (d.when_gpu_kind and chosen(P_KIND) == "cpu")

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


def param_order() -> tuple[str, ...]:
    """Every knob's parameter name in a fixed order: PARAM_ORDER, then knobs of the registry it
    does not list (in registry order), so a new knob needs no entry here."""
    from perfkit.tuner._space._knobs import KNOBS  # the registry imports this module

    return PARAM_ORDER + tuple(k.name for k in KNOBS if k.name not in PARAM_ORDER)


def normalize_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """Params in a canonical form (delay rounded, keys in a fixed order) for records and CSV."""
    out: dict[str, Any] = {}
    for key in param_order():
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

"""What every knob is made of: the resolving context, the extract info, the Knob record, helpers."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from perfkit.server.modelconfig import ModelConfig
from perfkit.tuner._space._core import (
    Dimension,
    TuneSpace,
)
from perfkit.tuner._space._model import Machine, ModelFacts

# Backends that run on both CPU and GPU (instance kind is a real choice there when a GPU exists).
BOTH_KINDS = frozenset({"onnxruntime", "pytorch", "tensorflow", "python"})
TRT_EP_BACKENDS = frozenset({"onnxruntime", "tensorflow"})
# Backends whose batch ceiling is fixed when the model is built, and why.
FIXED_BATCH_CEILING = {
    "tensorrt": "a TensorRT engine's optimization profile caps the batch, and it cannot be read without TensorRT",
    "tensorrtllm": "a TensorRT-LLM engine is built for its max batch size",
    "dali": "a DALI pipeline is serialized with its max batch size",
}
PARAMETER_PRECISION_BACKENDS = frozenset({"python", "pytorch"})
ABSENT = object()  # extract: the config does not hold this knob


@dataclass
class Ctx:
    """What resolving a knob reads: the request, the model, the machine, earlier knobs' results."""

    space: TuneSpace
    cfg: ModelConfig
    facts: ModelFacts
    machine: Machine
    latency_budget_us: float
    orig: dict[str, Any]
    engine_files: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    kinds: tuple[str, ...] = ()  # instance kinds candidates may have (resolved first)
    db_choices: tuple[bool, ...] = ()
    precision_via: str = ""
    # the error budget (Budget.max_error_rate): above 0 a candidate may reject requests, so the
    # queue policy is searched
    max_error_rate: float = 0.0
    # The workload's stated repeat rate (TuneSettings.repeat_fraction): what the response cache can hit
    repeat_fraction: float = 0.0

    @property
    def name(self) -> str:
        return self.facts.name

    @property
    def mbs(self) -> int:
        return int(self.cfg.max_batch_size)

    @property
    def sequence(self) -> bool:
        return self.cfg.HasField("sequence_batching")


@dataclass(frozen=True)
class ExtractInfo:
    backend: str
    precision_parameter: str = "precision"
    engine_files: Mapping[str, str] = field(default_factory=dict)
    parameter_keys: tuple[str, ...] = ()  # the config.pbtxt parameters the space searches


@dataclass(frozen=True)
class Knob:
    """One searched setting. resolve -> (dimension or None, why); extract -> value or ABSENT;
    apply writes a value into a config copy; rules: the validator rules that guard it."""

    name: str
    resolve: Callable[[Ctx], tuple[Dimension | None, str]]
    extract: Callable[[ModelConfig, ExtractInfo], Any]
    apply: Callable[[ModelConfig, Any, Any], None]
    rules: tuple[str, ...] = ()
    measurable: bool = True


def pow2_sizes(mbs: int) -> list[int]:
    """Preferred sizes 'pow2': every power of two from 2 up to mbs, and mbs itself."""
    sizes = [2**i for i in range(1, 31) if 2**i <= mbs]
    if mbs not in sizes and mbs >= 1:
        sizes.append(mbs)
    return sizes


def with_values(choices: tuple[Any, ...], *extra: Any) -> tuple[Any, ...]:
    return tuple(dict.fromkeys((*choices, *extra)))

"""perf_analyzer-format input data files (`--input-data FILE`): streams -> steps -> tensors.

The reference is perf_analyzer itself (github.com/triton-inference-server/perf_analyzer):
docs/input_data.md for the format, and its source for the behaviour:
- src/data_loader.cc  DataLoader::ParseData        streams, 'validation_data' alignment
- src/data_loader.cc  DataLoader::ReadTensorData   per-step tensors, optional inputs, b64, shapes
- src/data_loader.cc  DataLoader::ValidateTensor   shape against the model's dims, byte sizes
- src/perf_utils.cc   SerializeExplicitTensor       JSON values per datatype (strings for BYTES)
- src/infer_data_manager.cc  CreateAndPopulateInput       -b N: N consecutive steps in one request
- src/infer_data_manager_base.cc  GetInputData, ValidateShapeTensor, UpdateValidationOutputs
- src/infer_context.cc  UpdateJsonData (which steps a request starts at), ValidateOutputs

Where perfkit deliberately differs, the comment at that spot says so (search "Differs").
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from perfkit.errors import InputError
from perfkit.loadgen._requests import NP_DTYPES, ModelIO, Tensor, to_wire

# perf_analyzer lets a step carry a "model" key (the model name, for multi-model files); it is
# not a tensor. (data_loader.cc ReadTensorData: model_io_names.insert("model"))
_NON_TENSOR_KEYS = frozenset({"model"})

_INTEGER_TYPES = ("UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64")


@dataclass(frozen=True)
class StepTensor:
    """One tensor of one step, for a single batch element: its shape (no batch dim) and wire bytes."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    data: bytes


@dataclass(frozen=True)
class Step:
    """One step: the inputs it gives (an optional input may be absent) and the outputs it expects."""

    inputs: tuple[StepTensor, ...]
    expected: tuple[StepTensor, ...] = ()  # from 'validation_data'; empty when the file has none

    def input(self, name: str) -> StepTensor | None:
        """The step's tensor for input `name`, or None when the step omits it."""
        return next((t for t in self.inputs if t.name == name), None)


@dataclass(frozen=True)
class Stream:
    """One data stream: the steps a sequence plays back in order under one correlation ID."""

    steps: tuple[Step, ...]


@dataclass(frozen=True)
class InputData:
    """A whole data file: one stream for a flat 'data' list, one per inner list otherwise."""

    source: str
    streams: tuple[Stream, ...]

    @property
    def validated(self) -> bool:
        """Whether the file carries 'validation_data' (expected outputs)."""
        return any(step.expected for stream in self.streams for step in stream.steps)


@dataclass(frozen=True)
class ExpectedOutput:
    """What a request's output must be, byte for byte (batched like the request)."""

    name: str
    data: bytes


@dataclass(frozen=True)
class FileRequest:
    """One request built from a file: steps first_step.. of a stream, batched, with expected outputs."""

    stream: int
    first_step: int
    tensors: tuple[Tensor, ...]
    expected: tuple[ExpectedOutput, ...] = ()

    @property
    def where(self) -> str:
        """The request's place in the file, as messages name it."""
        return f"data[{self.stream}][{self.first_step}]" if self.stream else f"data[{self.first_step}]"


# -- reading ------------------------------------------------------------------------------------


def read_input_data(io: ModelIO, path: Path, *, shapes: dict[str, tuple[int, ...]]) -> InputData:
    """Parse a perf_analyzer JSON data file for model `io`; raises InputError naming file, step and tensor."""
    label = f"--input-data {path}"
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as err:
        raise InputError(f"{label}: cannot read ({err.strerror})") from None
    except UnicodeDecodeError:
        raise InputError(f"{label}: not a text (JSON) file") from None
    except ValueError as err:
        raise InputError(f"{label}: not valid JSON ({err})") from None
    streams = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(streams, list) or not streams:
        raise InputError(f"{label}: expected an object with a non-empty 'data' list (perf_analyzer format)")
    expected = doc.get("validation_data")
    if expected is not None and (not isinstance(expected, list) or len(expected) != len(streams)):
        raise InputError(
            f"{label}: 'validation_data' does not align with 'data' "
            f"({_length(expected)} entries for {len(streams)}); give one entry per data entry"
        )
    nested = [isinstance(s, list) for s in streams]
    if any(nested) and not all(nested):
        # data_loader.cc ValidateParsingMode
        raise InputError(f"{label}: 'data' mixes lists (streams) and objects (steps); use one or the other")
    inputs = [(name, dt, _effective_dims(name, dims, shapes)) for name, dt, dims in io.inputs]
    outputs = list(io.output_specs)
    if not all(nested):  # a flat list is one stream of steps (data_loader.cc ParseData)
        stream_list: list[tuple[list[Any], list[Any] | None]] = [(streams, expected)]
    else:
        stream_list = []
        for s, stream in enumerate(streams):
            out = None if expected is None else expected[s]
            if out is not None and (not isinstance(out, list) or len(out) != len(stream)):
                raise InputError(
                    f"{label}: validation_data[{s}] does not align with data[{s}] "
                    f"({_length(out)} steps for {len(stream)})"
                )
            if not stream:
                raise InputError(f"{label}: data[{s}] is an empty stream")
            stream_list.append((stream, out))
    parsed = []
    for s, (steps, outs) in enumerate(stream_list):
        prefix = f"{label}: data[{s}]" if all(nested) else f"{label}: data"
        parsed_steps = []
        for k, step in enumerate(steps):
            tensors = _read_step(io, f"{prefix}[{k}]", step, inputs, require_all=False)
            wanted: tuple[StepTensor, ...] = ()
            if outs is not None:
                out_prefix = prefix.replace(": data", ": validation_data", 1)
                wanted = _read_step(io, f"{out_prefix}[{k}]", outs[k], outputs, require_all=True)
            parsed_steps.append(Step(tensors, wanted))
        parsed.append(Stream(tuple(parsed_steps)))
    return InputData(str(path), tuple(parsed))


def _length(value: Any) -> str:
    return str(len(value)) if isinstance(value, list) else "not a list"


def _effective_dims(name: str, dims: tuple[int, ...], shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    # perf_analyzer applies --shape to the model's variable dims first (model_parser.cc), so a step's
    # own "shape" must then fit the --shape given, not only the model's -1 dims: seen with
    # float_data_with_shape.json and --shape INPUT:2 ("supplied shape of [1] ... incompatible").
    given = shapes.get(name)
    if given is None:
        return dims
    if len(given) != len(dims) or any(d not in (-1, g) for d, g in zip(dims, given)):
        raise InputError(
            f"--shape {name}:{','.join(map(str, given))} does not fit the model's dims {list(dims)}",
            hint="give a shape with the model's rank, fixing only its -1 dims",
        )
    return tuple(given)


def _read_step(
    io: ModelIO, where: str, step: Any, specs: list[tuple[str, str, tuple[int, ...]]], *, require_all: bool
) -> tuple[StepTensor, ...]:
    if not isinstance(step, dict):
        raise InputError(f"{where} is not an object of tensor name -> values")
    known = {name for name, _, _ in specs}
    # Newer perf_analyzer refuses a name the model lacks (data_loader.cc ReadTensorData: "is not found
    # in the model configuration"); the 2.41 release ignores it. Differs from 2.41 on purpose: a
    # misspelt input would otherwise be silently replaced by nothing.
    unknown = sorted(set(step) - known - _NON_TENSOR_KEYS)
    if unknown:
        raise InputError(f"{where} names {unknown}, which model {io.name!r} does not have (it has: {sorted(known)})")
    out = []
    for name, datatype, dims in specs:
        if name not in step:
            # data_loader.cc ReadTensorData: only inputs marked `optional: true` may be left out;
            # outputs are never optional there, so every validation step lists every output.
            if require_all or name not in io.optional:
                what = "output" if require_all else "input"
                raise InputError(f"{where} lacks {what} {name!r}", hint=_missing_hint(name, output=require_all))
            continue
        out.append(_read_tensor(f"{where}.{name}", name, datatype, dims, step[name]))
    return tuple(out)


def _missing_hint(name: str, *, output: bool) -> str:
    if output:
        return "each validation_data step lists every model output, as perf_analyzer requires"
    return f"add {name!r} to every step (only inputs marked optional in the model config may be left out)"


def _read_tensor(where: str, name: str, datatype: str, dims: tuple[int, ...], value: Any) -> StepTensor:
    shape: tuple[int, ...] | None = None
    raw: bytes | None = None
    content: Any = value
    if isinstance(value, dict):
        if "shape" in value:
            given = value["shape"]
            if not isinstance(given, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in given):
                raise InputError(f"{where}: 'shape' must be a list of integers, got {given!r}")
            shape = tuple(given)
        if "b64" in value:
            raw = _b64(where, value["b64"])
        elif "content" in value:
            content = value["content"]
            # {"content": {"b64": "..."}} is read like {"b64": "..."} (ReadTensorData)
            if isinstance(content, dict) and "b64" in content:
                raw = _b64(where, content["b64"])
            elif not isinstance(content, list):
                raise InputError(f"{where}: 'content' must be a list of values or {{\"b64\": ...}}")
        else:
            raise InputError(f"{where}: an object needs 'content' or 'b64'")
    elif not isinstance(value, list):
        raise InputError(f"{where}: expected a list of values or an object with 'content'/'b64', got {value!r}")
    if shape is None:
        shape = dims
    # data_loader.cc ValidateTensorShape: same rank, fixed dims equal, no dim left variable
    if any(d < 0 for d in shape):
        raise InputError(
            f"{where}: shape {list(shape)} is not fully defined",
            hint=f"give the tensor a 'shape' or pass --shape {name}:"
            + ",".join("4" if d < 0 else str(d) for d in shape),
        )
    if len(shape) != len(dims) or any(d not in (-1, s) for d, s in zip(dims, shape)):
        raise InputError(f"{where}: shape {list(shape)} does not fit the model's dims {list(dims)}")
    count = math.prod(shape)
    if raw is not None:
        if datatype != "BYTES":  # BYTES b64 is already the serialized (length-prefixed) tensor
            expect = count * (2 if datatype == "BF16" else np.dtype(NP_DTYPES[datatype]).itemsize)
            if len(raw) != expect:
                raise InputError(f"{where}: b64 holds {len(raw)} bytes, shape {list(shape)} needs {expect}")
        return StepTensor(name, datatype, shape, raw)
    flat = np.array(content, dtype=object).reshape(-1)
    if flat.size != count:
        raise InputError(f"{where}: {flat.size} values do not fill shape {list(shape)} ({count} needed)")
    array = _typed(where, datatype, flat.tolist()).reshape(shape)
    return StepTensor(name, datatype, shape, to_wire(array, datatype))


def _b64(where: str, text: Any) -> bytes:
    if not isinstance(text, str):
        raise InputError(f"{where}: the value of 'b64' must be a string")
    # perf_analyzer decodes with libb64, which needs no '=' padding and skips characters outside
    # the alphabet (the newlines of qa's image_data.json); Python's decoder wants the padding.
    cleaned = "".join(text.split())
    try:
        return base64.b64decode(cleaned + "=" * (-len(cleaned) % 4))
    except (binascii.Error, ValueError) as err:
        raise InputError(f"{where}: 'b64' is not base64 ({err})") from None


def _typed(where: str, datatype: str, values: list[Any]) -> np.ndarray:
    """Values of a JSON list as an array of `datatype`, by perf_utils.cc SerializeExplicitTensor's rules."""
    if datatype == "BYTES":
        # A number for a BYTES input is an error there ("unable to find string data in json").
        bad = _first_bad(values, lambda v: isinstance(v, str))
        if bad is not None:
            raise InputError(f"{where}: BYTES values must be strings, got {bad[0]!r}", hint='quote them: ["1", "2"]')
        return np.array([v.encode() for v in values], dtype=np.object_)
    if datatype == "BOOL":
        if not all(isinstance(v, bool) for v in values):
            raise InputError(f"{where}: BOOL values must be true or false")
        return np.array(values, dtype=np.bool_)
    if datatype in _INTEGER_TYPES:
        bad = _first_bad(values, lambda v: isinstance(v, int) and not isinstance(v, bool))
        if bad is not None:
            raise InputError(f"{where}: values are not {datatype} (found {bad[0]!r})")
        info = np.iinfo(NP_DTYPES[datatype])
        if any(v < info.min or v > info.max for v in values):
            raise InputError(f"{where}: values out of range for {datatype} ({info.min}..{info.max})")
        return np.array(values, dtype=NP_DTYPES[datatype])
    # Floating point. Differs on purpose: perf_analyzer refuses integers for FP32/FP64 (rapidjson's
    # IsDouble() is false for a literal without a decimal point: "unable to find float data in
    # json") and any list for FP16/BF16; an integer is an exact float value, so perfkit takes both.
    bad = _first_bad(values, lambda v: isinstance(v, (int, float)) and not isinstance(v, bool))
    if bad is not None:
        raise InputError(f"{where}: values are not {datatype} (found {bad[0]!r})")
    return np.array(values, dtype=NP_DTYPES[datatype])


def _first_bad(values: list[Any], ok: Callable[[Any], bool]) -> tuple[Any] | None:
    """The first value that is not ok, boxed (it may itself be None), or None when all are."""
    return next(((v,) for v in values if not ok(v)), None)


# -- batching -----------------------------------------------------------------------------------


def build_requests(io: ModelIO, data: InputData, *, batch_size: int) -> list[FileRequest]:
    """The requests perf_analyzer sends for a non-sequence model at -b batch_size; raises InputError.

    FileRequest d starts at step (d * batch_size) mod steps of stream 0 and carries batch_size
    consecutive steps, wrapping (infer_context.cc UpdateJsonData, infer_data_manager_base.cc
    GetInputData). Like perf_analyzer, every stream's batches are checked, though only stream 0
    is sent when the model keeps no sequences (infer_data_manager.cc CreateAndPopulateInputs).
    """
    per_stream = []
    for s, stream in enumerate(data.streams):
        per_stream.append([_batch(io, data, s, stream, k, batch_size) for k in range(len(stream.steps))])
    steps = len(data.streams[0].steps)
    period = steps // math.gcd(steps, batch_size)
    return [per_stream[0][(d * batch_size) % steps] for d in range(period)]


def _batch(io: ModelIO, data: InputData, s: int, stream: Stream, k: int, batch_size: int) -> FileRequest:
    n = len(stream.steps)
    members = [stream.steps[(k + i) % n] for i in range(batch_size)]
    where = f"--input-data {data.source}: " + (f"data[{s}][{k}]" if len(data.streams) > 1 else f"data[{k}]")
    batched = io.max_batch_size > 0
    tensors = []
    for name, datatype, _ in io.inputs:
        got = [m.input(name) for m in members]
        present = [t for t in got if t is not None]
        if not present:
            continue  # an optional input no step of this batch gives
        if len(present) != len(got):
            raise InputError(
                f"{where}: input {name!r} is given in some steps of a -b {batch_size} batch but not in others",
                hint="a batch needs the same optional inputs in each of its steps (as perf_analyzer)",
            )
        first = present[0]
        if name in io.shape_tensors:
            # A shape tensor is sent once, without a batch dim, and must be the same in every
            # step of the batch (infer_data_manager_base.cc ValidateShapeTensor).
            if any(t.data != first.data for t in present[1:]):
                raise InputError(f"{where}: shape tensor {name!r} differs between the steps of a -b {batch_size} batch")
            tensors.append(Tensor(name, datatype, first.shape, first.data))
            continue
        for t in present[1:]:
            if t.shape != first.shape:
                raise InputError(
                    f"{where}: cannot batch steps of different shapes: input {name!r} has shape "
                    f"{list(first.shape)} and then {list(t.shape)} within -b {batch_size}",
                    hint="use -b 1, or give the steps of each batch one shape",
                )
        shape = ((batch_size,) if batched else ()) + first.shape
        tensors.append(Tensor(name, datatype, shape, b"".join(t.data for t in present)))
    expected = []
    if any(m.expected for m in members):
        for name, _, _ in io.output_specs:
            parts = [next(t.data for t in m.expected if t.name == name) for m in members if m.expected]
            if name in io.shape_tensors:
                parts = parts[:1]  # infer_data_manager_base.cc UpdateValidationOutputs
            expected.append(ExpectedOutput(name, b"".join(parts)))
    return FileRequest(s, k, tuple(tensors), tuple(expected))


def file_tensors(io: ModelIO, path: Path, *, batch_size: int, shapes: dict[str, tuple[int, ...]]) -> list[list[Tensor]]:
    """The batched requests of a perf_analyzer data file, as tensor lists; raises InputError."""
    data = read_input_data(io, path, shapes=shapes)
    return [list(r.tensors) for r in build_requests(io, data, batch_size=batch_size)]


def check_synthetic(io: ModelIO) -> None:
    """Refuse generated data for shape tensors, as perf_analyzer does; raises InputError."""
    # data_loader.cc GenerateData: "can not generate data for shape tensor"
    if io.shape_tensors:
        name = sorted(io.shape_tensors)[0]
        raise InputError(
            f"cannot generate data for shape tensor {name!r} of model {io.name!r}",
            hint="give its values in a data file: --input-data FILE.json",
        )

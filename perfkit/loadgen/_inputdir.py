"""`--input-data` as perf_analyzer reads it beyond one JSON file: a directory, and the flag repeated.

- A directory holds one file per input, named as the input (data_loader.cc ReadDataFromDir): the
  tensor's raw bytes for numeric types, one string per line for BYTES; files named as outputs,
  where present, are the expected outputs. It is one stream of one step.
- Several sources (the flag repeated) are read in order and their streams appended, as
  perf_analyzer's data loader does for each `--input-data` it is given.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from perfkit.errors import InputError
from perfkit.loadgen._inputdata import InputData, Step, StepTensor, Stream, _effective_dims, read_input_data
from perfkit.loadgen._requests import NP_DTYPES, ModelIO, to_wire

# ProfileSpec.input_data holds several sources joined by this separator (the flag repeated)
SOURCES_SEP = os.pathsep


def split_sources(input_data: str) -> list[str]:
    """The sources of a spec's input_data: one path, or several joined by os.pathsep."""
    try:
        if Path(input_data).exists():
            return [input_data]
    except OSError:  # several sources joined can be longer than a path may be
        pass
    return [p for p in input_data.split(SOURCES_SEP) if p]


def read_sources(io: ModelIO, input_data: str, *, shapes: dict[str, tuple[int, ...]]) -> InputData:
    """Every source of `input_data` (JSON files, directories), streams appended; raises InputError."""
    parts = []
    for src in split_sources(input_data):
        path = Path(src)
        if path.is_dir():
            parts.append(read_input_dir(io, path, shapes=shapes))
        elif path.is_file():
            parts.append(read_input_data(io, path, shapes=shapes))
        else:
            raise InputError(f"--input-data {src}: not 'zero', 'random', an existing JSON file or a directory")
    if len(parts) == 1:
        return parts[0]
    return InputData(" + ".join(p.source for p in parts), tuple(s for p in parts for s in p.streams))


def read_input_dir(io: ModelIO, path: Path, *, shapes: dict[str, tuple[int, ...]]) -> InputData:
    """A perf_analyzer data directory (one file per input); raises InputError naming file and input."""
    inputs = tuple(_read_file(io, path, name, dt, dims, shapes, required=True) for name, dt, dims in io.inputs)
    outputs = [_read_file(io, path, name, dt, dims, shapes, required=False) for name, dt, dims in io.output_specs]
    expected = tuple(t for t in outputs if t is not None)
    if expected and len(expected) != len(outputs):
        expected = ()  # perf_analyzer validates only when it has every output
    step = Step(tuple(t for t in inputs if t is not None), expected)
    return InputData(str(path), (Stream((step,)),))


def _read_file(
    io: ModelIO,
    folder: Path,
    name: str,
    datatype: str,
    dims: tuple[int, ...],
    shapes: dict[str, tuple[int, ...]],
    *,
    required: bool,
) -> StepTensor | None:
    file = folder / name
    label = f"--input-data {folder}: {name}"
    if not file.is_file():
        if required:
            raise InputError(f"{label}: no file {file}", hint="a data directory holds one file per input, named as it")
        return None
    shape = _effective_dims(name, dims, shapes)
    if any(d < 0 for d in shape):
        raise InputError(
            f"{label}: input {name} contains dynamic shape, provide shapes to send along with the request",
            hint=f"pass --shape {name}:" + ",".join("4" if d < 0 else str(d) for d in shape),
        )
    count = math.prod(shape)
    if datatype == "BYTES":
        lines = file.read_text().splitlines()
        if len(lines) != count:
            raise InputError(f"{label}: {len(lines)} strings (lines), shape {list(shape)} needs {count}")
        array = np.array([ln.encode() for ln in lines], dtype=np.object_).reshape(shape)
        return StepTensor(name, datatype, shape, to_wire(array, datatype))
    raw = file.read_bytes()
    expect = count * (2 if datatype == "BF16" else np.dtype(NP_DTYPES[datatype]).itemsize)
    if len(raw) != expect:
        raise InputError(f"{label}: {len(raw)} bytes, shape {list(shape)} of {datatype} needs {expect}")
    return StepTensor(name, datatype, shape, raw)

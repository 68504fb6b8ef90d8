"""Requests built once, before the hot path: tensors from model metadata, payload bytes per protocol."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from perfkit.errors import InputError

NP_DTYPES: dict[str, Any] = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BF16": np.float32,  # generated as float32, sent as the top 16 bits
    "BYTES": np.object_,
}


@dataclass(frozen=True)
class Tensor:
    """One input tensor, ready to send: its wire bytes and shape (batch dim included)."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    data: bytes


@dataclass(frozen=True)
class ModelIO:
    """What a model expects, from the server's metadata and config."""

    name: str
    version: str
    max_batch_size: int
    inputs: tuple[tuple[str, str, tuple[int, ...]], ...]  # name, datatype, dims without batch
    outputs: tuple[str, ...]
    output_specs: tuple[tuple[str, str, tuple[int, ...]], ...] = ()  # like inputs, for validation
    optional: frozenset[str] = frozenset()  # inputs marked `optional: true`: a request may omit them
    shape_tensors: frozenset[str] = frozenset()  # `is_shape_tensor: true`: sent without a batch dim

    @classmethod
    def from_server(cls, metadata: dict[str, Any], config: dict[str, Any], version: str = "") -> ModelIO:
        """Build from GET /v2/models/M and /config answers."""
        mbs = int(config.get("max_batch_size", 0) or 0)

        def specs(key: str) -> tuple[tuple[str, str, tuple[int, ...]], ...]:
            out = []
            for t in metadata.get(key, []):
                shape = tuple(int(d) for d in t["shape"])
                out.append((t["name"], t["datatype"], shape[1:] if mbs > 0 else shape))
            return tuple(out)

        inputs, output_specs = specs("inputs"), specs("outputs")
        flagged = [*config.get("input", []), *config.get("output", [])]
        return cls(
            metadata.get("name", config.get("name", "")),
            version,
            mbs,
            inputs,
            tuple(name for name, _, _ in output_specs),
            output_specs,
            frozenset(t["name"] for t in config.get("input", []) if t.get("optional")),
            frozenset(t["name"] for t in flagged if t.get("is_shape_tensor")),
        )


def to_wire(array: np.ndarray, datatype: str) -> bytes:
    """Tensor bytes as Triton's binary extension carries them."""
    if datatype == "BYTES":
        flat = array.reshape(-1)
        parts = []
        for item in flat.tolist():
            b = item if isinstance(item, bytes) else str(item).encode()
            parts.append(len(b).to_bytes(4, "little") + b)
        return b"".join(parts)
    if datatype == "BF16":
        bits = np.ascontiguousarray(array, dtype=np.float32).view(np.uint32) >> 16
        return bits.astype("<u2").tobytes()
    return (
        np.ascontiguousarray(array, dtype=NP_DTYPES[datatype])
        .astype(np.dtype(NP_DTYPES[datatype]).newbyteorder("<"))
        .tobytes()
    )


def _resolve_dims(io: ModelIO, name: str, dims: tuple[int, ...], shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    if name in shapes:
        given = tuple(shapes[name])
        if len(given) != len(dims) or any(d not in (-1, g) for d, g in zip(dims, given)):
            raise InputError(
                f"--shape {name}:{','.join(map(str, given))} does not fit the model's dims {list(dims)}",
                hint="give a shape with the model's rank, fixing only its -1 dims",
            )
        return given
    if any(d < 0 for d in dims):
        raise InputError(
            f"input {name!r} of model {io.name!r} has variable dims {list(dims)}",
            hint=f"give its shape with --shape {name}:" + ",".join("4" if d < 0 else str(d) for d in dims),
        )
    return dims


def synthetic_tensors(
    io: ModelIO,
    *,
    mode: str,
    batch_size: int,
    shapes: dict[str, tuple[int, ...]],
    string_length: int,
    seed: int,
    string_data: str | None = None,
) -> list[Tensor]:
    """One step of random (seeded) or zero inputs for every model input; BYTES elements hold
    `string_data` where given (perf_analyzer's --string-data)."""
    rng = np.random.default_rng(seed)
    tensors = []
    for name, datatype, dims in io.inputs:
        dims = _resolve_dims(io, name, dims, shapes)
        full = ((batch_size,) if io.max_batch_size > 0 else ()) + dims
        count = int(np.prod(full)) if full else 1
        if datatype == "BYTES":
            if string_data is not None:
                values = [string_data.encode()] * count
            elif mode == "zero":
                values = [b"0" * string_length] * count
            else:
                letters = rng.integers(97, 123, size=(count, string_length), dtype=np.uint8)
                values = [row.tobytes() for row in letters]
            array = np.array(values, dtype=np.object_).reshape(full)
        elif mode == "zero":
            array = np.zeros(full, dtype=NP_DTYPES[datatype])
        elif datatype == "BOOL":
            array = rng.integers(0, 2, size=full).astype(np.bool_)
        elif datatype in ("FP16", "FP32", "FP64", "BF16"):
            array = rng.random(full, dtype=np.float64).astype(NP_DTYPES[datatype])
        else:
            array = rng.integers(0, 100, size=full).astype(NP_DTYPES[datatype])
        tensors.append(Tensor(name, datatype, full, to_wire(array, datatype)))
    return tensors


# -- payloads ------------------------------------------------------------------------------------

# Custom request parameters (perf_analyzer's --request-parameter): (name, value, type) with type
# "string", "int" or "bool" and the value as text ("true"/"false" for bool), read by `parameter_values`.
RequestParameters = tuple[tuple[str, str, str], ...]
PARAMETER_TYPES = ("string", "int", "bool")


def parameter_values(parameters: RequestParameters) -> dict[str, bool | int | str]:
    """Each parameter's typed value by name (the last of a repeated name wins, as in perf_analyzer);
    raises InputError for a type or value that is not one of PARAMETER_TYPES' forms."""
    out: dict[str, bool | int | str] = {}
    for name, value, kind in parameters:
        if kind == "string":
            out[name] = value
        elif kind == "bool" and value in ("true", "false"):
            out[name] = value == "true"
        elif kind == "int" and re.fullmatch(r"[+-]?\d+", value) and -(2**63) <= int(value) < 2**63:
            out[name] = int(value)
        else:
            raise InputError(
                f"request parameter {name}:{value}:{kind} is not a string, an int64 or a bool (true/false)",
                hint="give NAME:VALUE:TYPE with TYPE one of " + ", ".join(PARAMETER_TYPES),
            )
    return out


@dataclass(frozen=True)
class ShmBinding:
    """Where a tensor lives in a registered shared-memory region instead of the request body."""

    region: str
    byte_size: int
    offset: int = 0


def http_payload(
    io: ModelIO,
    tensors: list[Tensor],
    host: str,
    *,
    shm_inputs: dict[str, ShmBinding] | None = None,
    shm_outputs: dict[str, ShmBinding] | None = None,
    headers: tuple[tuple[str, str], ...] = (),
    parameters: RequestParameters = (),
) -> bytes:
    """A complete HTTP/1.1 request (headers and body) using the binary tensor extension; `headers`
    are added as given (perf_analyzer's -H), `parameters` go in the request's JSON `parameters`."""
    inputs = []
    body_parts = []
    for t in tensors:
        entry: dict[str, Any] = {"name": t.name, "shape": list(t.shape), "datatype": t.datatype}
        if shm_inputs and t.name in shm_inputs:
            b = shm_inputs[t.name]
            entry["parameters"] = {
                "shared_memory_region": b.region,
                "shared_memory_byte_size": b.byte_size,
                "shared_memory_offset": b.offset,
            }
        else:
            entry["parameters"] = {"binary_data_size": len(t.data)}
            body_parts.append(t.data)
        inputs.append(entry)
    outputs = []
    for name in io.outputs:
        if shm_outputs and name in shm_outputs:
            b = shm_outputs[name]
            outputs.append(
                {
                    "name": name,
                    "parameters": {
                        "shared_memory_region": b.region,
                        "shared_memory_byte_size": b.byte_size,
                        "shared_memory_offset": b.offset,
                    },
                }
            )
        else:
            outputs.append({"name": name, "parameters": {"binary_data": True}})
    header = json_header(inputs, outputs, parameters)
    body = header + b"".join(body_parts)
    path = f"/v2/models/{io.name}" + (f"/versions/{io.version}" if io.version else "") + "/infer"
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/octet-stream\r\n"
        f"Inference-Header-Content-Length: {len(header)}\r\nContent-Length: {len(body)}\r\n"
        + "".join(f"{k}: {v}\r\n" for k, v in headers)
        + "\r\n"
    )
    return head.encode() + body


def json_header(inputs: list[Any], outputs: list[Any], parameters: RequestParameters = ()) -> bytes:
    """An HTTP infer request's JSON: request `parameters` (if any) first, then inputs and outputs."""
    top: dict[str, Any] = {"parameters": parameter_values(parameters)} if parameters else {}
    top.update(inputs=inputs, outputs=outputs)
    return json.dumps(top, separators=(",", ":")).encode()


def grpc_payload(
    io: ModelIO,
    tensors: list[Tensor],
    *,
    shm_inputs: dict[str, ShmBinding] | None = None,
    shm_outputs: dict[str, ShmBinding] | None = None,
    parameters: RequestParameters = (),
) -> bytes:
    """A serialized ModelInferRequest (sent as raw bytes: no protobuf work per request); `parameters`
    are its `parameters` map (InferParameter bool_param, int64_param or string_param, as
    perf_analyzer's gRPC client sets them)."""
    from tritonclient.grpc import service_pb2

    req = service_pb2.ModelInferRequest(model_name=io.name, model_version=io.version)
    for name, value in parameter_values(parameters).items():
        if isinstance(value, bool):
            req.parameters[name].bool_param = value
        elif isinstance(value, int):
            req.parameters[name].int64_param = value
        else:
            req.parameters[name].string_param = value
    for t in tensors:
        inp = req.inputs.add(name=t.name, datatype=t.datatype, shape=list(t.shape))
        if shm_inputs and t.name in shm_inputs:
            b = shm_inputs[t.name]
            inp.parameters["shared_memory_region"].string_param = b.region
            inp.parameters["shared_memory_byte_size"].int64_param = b.byte_size
            inp.parameters["shared_memory_offset"].int64_param = b.offset
        else:
            req.raw_input_contents.append(t.data)
    for name in io.outputs:
        out = req.outputs.add(name=name)
        if shm_outputs and name in shm_outputs:
            b = shm_outputs[name]
            out.parameters["shared_memory_region"].string_param = b.region
            out.parameters["shared_memory_byte_size"].int64_param = b.byte_size
            out.parameters["shared_memory_offset"].int64_param = b.offset
    return bytes(req.SerializeToString())

"""HTTP infer requests with tensors as JSON (perf_analyzer's --input-tensor-format/--output-tensor-format json)."""

from __future__ import annotations

from typing import Any

from perfkit.loadgen._requests import ModelIO, RequestParameters, Tensor, http_payload, json_header
from perfkit.loadgen._stream_sse import _json_data, http_infer_path


def http_json_payload(
    io: ModelIO,
    tensors: list[Tensor],
    host: str,
    *,
    input_json: bool,
    output_json: bool,
    headers: tuple[tuple[str, str], ...] = (),
    parameters: RequestParameters = (),
) -> bytes:
    """A complete HTTP/1.1 infer request: inputs as JSON `data` (else binary), outputs asked as JSON
    (`binary_data: false`, else binary), request `parameters` in its JSON. Built once, before the hot path."""
    if not input_json and not output_json:
        return http_payload(io, tensors, host, headers=headers, parameters=parameters)
    inputs: list[dict[str, Any]] = []
    binary = []
    for t in tensors:
        entry: dict[str, Any] = {"name": t.name, "shape": list(t.shape), "datatype": t.datatype}
        if input_json:
            entry["data"] = _json_data(t)
        else:
            entry["parameters"] = {"binary_data_size": len(t.data)}
            binary.append(t.data)
        inputs.append(entry)
    outputs = [{"name": n, "parameters": {"binary_data": not output_json}} for n in io.outputs]
    top = json_header(inputs, outputs, parameters)
    body = top + b"".join(binary)
    head = f"POST {http_infer_path(io)} HTTP/1.1\r\nHost: {host}\r\n"
    if binary:
        head += f"Content-Type: application/octet-stream\r\nInference-Header-Content-Length: {len(top)}\r\n"
    else:
        head += "Content-Type: application/json\r\n"
    head += f"Content-Length: {len(body)}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n"
    return head.encode() + body

"""Checks a data file's 'validation_data' against the model's real outputs before measuring.

perf_analyzer compares every response during the run (infer_context.cc ValidateOutputs) and, on
a mismatch, stops with "Failed to maintain requested inference load" without naming the step or
the tensor. perfkit instead sends each distinct request of the file once, before any level, and
compares byte for byte as perf_analyzer does: the same verdict for a deterministic model, a
message that names the step and tensor, and no comparison work on the measurement's hot path.
"""

from __future__ import annotations

import http.client
import json
import logging
from typing import Any

from perfkit.errors import InputError, ServerError
from perfkit.loadgen import FileRequest, ModelIO, http_payload
from perfkit.server.base import Server
from perfkit.server.remote import parse_host_port

log = logging.getLogger(__name__)


class OutputMismatchError(InputError):
    """The model's output differs from the data file's validation_data (exit code 3, bad input)."""


# correlation IDs of validation sequences: far from the measurement's (which start at 1 by default)
VALIDATION_SEQUENCE_ID = 2**40


def validate_outputs(
    server: Server,
    io: ModelIO,
    requests: list[FileRequest],
    *,
    source: str,
    timeout_s: float = 30.0,
    sequence: bool = False,
) -> int:
    """Send each request that has expected outputs once over HTTP and compare; returns how many were checked.

    For a sequence model (`sequence`), each data stream's requests go in order as one sequence
    (correlation ID, start and end flags), as the measurement sends them. Raises
    OutputMismatchError naming the step and tensor on the first difference, ServerError when
    the server cannot answer.
    """
    host, port = parse_host_port(server.endpoints.http_url)
    checked = 0
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    order = sorted(requests, key=lambda r: (r.stream, r.first_step)) if sequence else requests
    try:
        for k, req in enumerate(order):
            seq: dict[str, Any] | None = None
            if sequence:
                starts = k == 0 or order[k - 1].stream != req.stream
                ends = k == len(order) - 1 or order[k + 1].stream != req.stream
                seq = {"sequence_id": VALIDATION_SEQUENCE_ID + req.stream, "sequence_start": starts}
                seq["sequence_end"] = ends
            elif not req.expected:
                continue
            outputs = _infer(conn, io, req, server.endpoints.http_url, seq)
            if not req.expected:
                continue
            for want in req.expected:
                got = outputs.get(want.name)
                where = f"--input-data {source}: validation_data for {req.where}, output {want.name!r}"
                if got is None:
                    raise OutputMismatchError(f"{where}: the model returned no such output")
                if len(got) != len(want.data):
                    raise OutputMismatchError(
                        f"{where}: the model returned {len(got)} bytes, the file expects {len(want.data)}"
                    )
                if got != want.data:
                    first = next(i for i, (a, b) in enumerate(zip(got, want.data)) if a != b)
                    raise OutputMismatchError(
                        f"{where}: the model's output differs from the expected one (first at byte {first})",
                        hint="check the expected values, or drop 'validation_data' to measure without the check",
                    )
            checked += 1
    finally:
        conn.close()
    log.info("validation_data: %d request(s) matched the model's outputs", checked)
    return checked


def _infer(
    conn: http.client.HTTPConnection, io: ModelIO, req: FileRequest, host: str, sequence: dict[str, Any] | None = None
) -> dict[str, bytes]:
    """POST the request as perfkit sends it (with `sequence` parameters if given); returns each output's
    raw bytes (BYTES length-prefixed)."""
    raw = http_payload(io, list(req.tensors), host)
    head, body = raw.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    path = lines[0].split(" ")[1]
    headers = dict(line.split(": ", 1) for line in lines[1:])
    headers.pop("Host", None)
    if sequence is not None:
        n = int(headers["Inference-Header-Content-Length"])
        doc = json.loads(body[:n])
        doc["parameters"] = sequence
        top = json.dumps(doc, separators=(",", ":")).encode()
        body = top + body[n:]
        headers["Inference-Header-Content-Length"] = str(len(top))
        headers["Content-Length"] = str(len(body))
    try:
        conn.request("POST", path, body=body, headers=headers)
        resp = conn.getresponse()
        payload = resp.read()
    except OSError as err:
        raise ServerError(f"validation request to {host} failed: {err}") from None
    if resp.status != 200:
        raise ServerError(f"validation request for {req.where} failed: HTTP {resp.status} {payload[:300]!r}")
    size = resp.getheader("Inference-Header-Content-Length")
    n = int(size) if size is not None else len(payload)
    header: dict[str, Any] = json.loads(payload[:n])
    out: dict[str, bytes] = {}
    offset = n
    for o in header.get("outputs", []):
        nbytes = int(o.get("parameters", {}).get("binary_data_size", 0))
        out[o["name"]] = payload[offset : offset + nbytes]
        offset += nbytes
    return out

"""Streamed requests over Triton's HTTP generate_stream endpoint (server-sent events).

`POST /v2/models/M/generate_stream` with a JSON body of the model's inputs answers
`text/event-stream` in HTTP/1.1 chunks: one `data: {...}` event per response, an
event whose object has an "error" key on failure, and the zero-length last chunk when
the final response is sent. Each event's arrival is one response (one token for an
LLM-style model); the last chunk is the request's completion. One keep-alive
connection carries one request at a time; requests are built once (bytes).
"""

from __future__ import annotations

import functools
import json
from time import perf_counter_ns
from typing import Any

import numpy as np

from perfkit.errors import UsageError
from perfkit.loadgen._keepalive import KeepAliveConn, KeepAlivePool
from perfkit.loadgen._requests import NP_DTYPES, ModelIO, Tensor
from perfkit.loadgen._stream_transport import SeqFlags
from perfkit.records import STATUS_CONNECTION_CLOSED, STATUS_PROTOCOL, STATUS_STREAM_ERROR


def _json_value(t: Tensor) -> Any:
    if t.datatype == "BYTES":
        values, data, i = [], t.data, 0
        while i + 4 <= len(data):
            n = int.from_bytes(data[i : i + 4], "little")
            values.append(data[i + 4 : i + 4 + n].decode(errors="replace"))
            i += 4 + n
    elif t.datatype in NP_DTYPES and t.datatype != "BF16":
        values = np.frombuffer(t.data, dtype=np.dtype(NP_DTYPES[t.datatype]).newbyteorder("<")).tolist()
    else:
        raise UsageError(f"input {t.name!r} ({t.datatype}) cannot be sent to generate_stream", hint="use -i grpc")
    return values[0] if len(values) == 1 else values


def sse_payload(io: ModelIO, tensors: list[Tensor], host: str, headers: tuple[tuple[str, str], ...] = ()) -> bytes:
    """One HTTP request for generate_stream: the step's inputs as a JSON object, `headers` (perf_analyzer's
    -H) among its own; raises UsageError."""
    if io.max_batch_size > 0 and any(t.shape and t.shape[0] > 1 for t in tensors):
        raise UsageError("generate_stream takes one request per call", hint="use -b 1")
    body = json.dumps({t.name: _json_value(t) for t in tensors}, separators=(",", ":")).encode()
    path = f"/v2/models/{io.name}" + (f"/versions/{io.version}" if io.version else "") + "/generate_stream"
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream\r\nContent-Length: {len(body)}\r\n"
        + "".join(f"{k}: {v}\r\n" for k, v in headers)
        + "\r\n"
    )
    return head.encode() + body


class _SseConn(KeepAliveConn):
    """One keep-alive connection; parses a chunked event stream per request."""

    def __init__(self, eng: SseTransport) -> None:
        super().__init__(eng)
        self.eng: SseTransport = eng
        self.head_done = False
        self.chunked = False
        self.need = -1  # body bytes left (non-chunked error answers)
        self.code = 0
        self.events = bytearray()
        self.unary = eng.unary  # plain infer answers (one JSON response), not an event stream

    def begin(self, rid: str) -> None:
        self.head_done = False
        self.events.clear()

    def _step(self, now: int) -> bool:
        buf = self.buf
        if not self.head_done:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return False
            head = bytes(buf[:end]).lower()
            del buf[: end + 4]
            self.code = int(head[9:12])
            self.head_done = True
            self.chunked = b"transfer-encoding: chunked" in head
            i = head.find(b"content-length:")
            self.need = (
                int(head[i + 15 : head.find(b"\r\n", i) if head.find(b"\r\n", i) > 0 else None]) if i >= 0 else 0
            )
            return True
        if not self.chunked:
            if len(buf) < self.need:
                return False
            body = bytes(buf[: self.need])
            del buf[: self.need]
            if self.unary and self.code == 200:
                req = self.eng.inflight.get(self.rid or "")
                if req is not None:
                    req.responses.append(now)
                self._done(now, 0, "")
                return False
            status = self.code if self.code != 200 else STATUS_PROTOCOL
            self._done(now, status, body.decode(errors="replace"))
            return False
        line_end = buf.find(b"\r\n")
        if line_end < 0:
            return False
        size = int(bytes(buf[:line_end]).split(b";")[0], 16)
        if len(buf) < line_end + 2 + size + 2:
            return False
        chunk = bytes(buf[line_end + 2 : line_end + 2 + size])
        del buf[: line_end + 2 + size + 2]
        if size == 0:
            self._done(now, 0 if self.code == 200 else self.code, "")
            return False
        self.events += chunk
        while True:
            cut = self.events.find(b"\n\n")
            if cut < 0:
                return True
            event = bytes(self.events[:cut])
            del self.events[: cut + 2]
            self._event(event, now)

    def _event(self, event: bytes, now: int) -> None:
        if not event.startswith(b"data:"):
            return
        req = self.eng.inflight.get(self.rid or "")
        if req is None:
            return
        if b'"error"' in event:
            self.eng.ledger.note(STATUS_STREAM_ERROR, event[5:300].decode(errors="replace").strip())
            req.failed = True
            return
        req.responses.append(now)

    def _done(self, now: int, status: int, message: str) -> None:
        rid, self.rid = self.rid, None
        req = self.eng.inflight.get(rid or "")
        if req is not None:
            if status == 0 and req.failed:
                status = STATUS_STREAM_ERROR
            self.eng.idle.append(self)
            self.eng._finish(rid or "", req, now, status, message or f"HTTP {self.code}")
        else:
            self.eng.idle.append(self)

    def connection_lost(self, exc: Exception | None) -> None:
        eng = self.eng
        self.leave_pool()
        rid, self.rid = self.rid, None
        req = eng.inflight.get(rid or "")
        if req is not None:
            message = str(exc or "server closed the connection")
            eng._finish(rid or "", req, perf_counter_ns(), STATUS_CONNECTION_CLOSED, message)


class SseTransport(KeepAlivePool):
    """Streamed requests over generate_stream: one request at a time per keep-alive connection."""

    unary = False

    def connection(self) -> KeepAliveConn:
        return _SseConn(self)

    def _request(self, rid: str, index: int, seq: SeqFlags | None) -> bytes:
        return self.cfg.payloads[index]  # HTTP requests carry no protobuf suffix


def _json_data(t: Tensor) -> list[Any]:
    value = _json_value(t)
    return value if isinstance(value, list) else [value]


def http_sequence_body(io: ModelIO, tensors: list[Tensor]) -> bytes:
    """The JSON infer body of one step, without its opening brace: per-request fields go in front."""
    inputs = [{"name": t.name, "shape": list(t.shape), "datatype": t.datatype, "data": _json_data(t)} for t in tensors]
    return json.dumps({"inputs": inputs}, separators=(",", ":")).encode()[1:]


def http_infer_path(io: ModelIO) -> str:
    """The KServe v2 infer path of the model (and version)."""
    return f"/v2/models/{io.name}" + (f"/versions/{io.version}" if io.version else "") + "/infer"


class HttpSequenceTransport(SseTransport):
    """Sequence models over plain HTTP infer calls, sequence ID and flags in each request's parameters.

    A sequence's next step goes out only after its previous one answered (one request in
    flight per sequence, as --serial-sequences): on separate connections two steps in
    flight together could reach the server out of order.
    """

    unary = True

    @functools.cached_property
    def _extra(self) -> str:
        return "".join(f"{k}: {v}\r\n" for k, v in self.cfg.headers)

    def _request(self, rid: str, index: int, seq: SeqFlags | None) -> bytes:
        params = f'{{"id":"{rid}",'
        if seq is not None:
            wire, start, end = seq
            params = (
                f'{{"id":"{rid}","parameters":{{"sequence_id":{json.dumps(wire)},'
                f'"sequence_start":{str(start).lower()},"sequence_end":{str(end).lower()}}},'
            )
        body = params.encode() + self.cfg.payloads[index]
        head = (
            f"POST {self.cfg.http_path} HTTP/1.1\r\nHost: {self.cfg.host}:{self.cfg.port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n{self._extra}\r\n"
        ).encode()
        return head + body

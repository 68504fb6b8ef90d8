"""Streamed requests over gRPC ModelStreamInfer: the response parser, and the grpc.aio transport.

One bidirectional stream carries every request; responses are matched to requests by
the request `id`, which is appended to the prebuilt request bytes as one more protobuf
field (a later field of the same number wins, so no re-serialization). Each request
also asks for `triton_enable_empty_final_response`, so every request ends with a
response whose `triton_final_response` parameter is true, empty or not: that is the
request's completion time. Each non-empty response's arrival is timestamped (one per
token for an LLM-style model).

`AioStreamTransport` runs the stream on grpc.aio (the reference; the hand-written
HTTP/2 one in `_stream_h2` is the default). A stream that breaks is replaced by the
next request, and counted as a reconnect once the new one answers.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any

from perfkit.loadgen._ledger import Ledger
from perfkit.loadgen._stream_parts import _Req, request_suffix
from perfkit.loadgen._stream_transport import SeqFlags, StreamConfig, StreamTransport
from perfkit.records import GRPC_STATUS_BASE, STATUS_CONNECTION_CLOSED, STATUS_STREAM_ERROR

STREAM_INFER = "/inference.GRPCInferenceService/ModelStreamInfer"
_FINAL = "triton_final_response"
_parse: Any = None
# ModelInferResponse.parameters entries {1: "triton_final_response", 2: InferParameter{1: bool}}
_FINAL_KEY = b"\n\x15triton_final_response"
_FINAL_TRUE = _FINAL_KEY + b"\x12\x02\x08\x01"
_FINAL_FALSE = _FINAL_KEY + b"\x12\x02\x08\x00"


def scan_response(raw: bytes) -> tuple[str, bool, bool] | None:
    """(id, has outputs, final) of a ModelStreamInferResponse, read off its top-level fields.

    The fast path of every streamed response: a protobuf parse builds objects this never
    needs, and on a loaded machine each response's wakeup pays for every cold byte touched.
    None when the message needs the full parse: an error message (field 1), an
    unexpected wire type, a final-response parameter in any other encoding, or a
    malformed length.
    """
    n = len(raw)
    try:
        if raw[0] != 0x12:  # infer_response (field 2, length-delimited) first and only
            return None
        i, length = _length_at(raw, 1)
        if i + length != n:
            return None
        rid, outputs, final = "", False, False
        while i < n:
            tag = raw[i]
            length = raw[i + 1]
            i += 2
            if length & 0x80:  # lengths of 128 bytes and more
                i, length = _length_at(raw, i - 1)
            end = i + length
            if tag & 7 != 2 or end > n:  # every ModelInferResponse field is length-delimited
                return None
            if tag == 0x1A:  # id
                rid = raw[i:end].decode()
            elif tag == 0x22 and raw.startswith(_FINAL_KEY, i):  # parameters: the final-response flag
                entry = raw[i:end]
                if entry == _FINAL_TRUE:
                    final = True
                elif entry != _FINAL_FALSE:
                    return None
            elif tag == 0x2A:  # outputs
                outputs = True
            i = end
    except (IndexError, UnicodeDecodeError):  # truncated, or an id that is not UTF-8
        return None
    return rid, outputs, final


def _length_at(raw: bytes, i: int) -> tuple[int, int]:
    """(position after, value) of the varint at raw[i]."""
    value, shift = 0, 0
    while True:
        b = raw[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return i, value
        shift += 7


def on_stream_message(
    transport: StreamTransport, raw: bytes, now: int, finish: Callable[[str, _Req, int, int, str], None] | None = None
) -> None:
    """One ModelStreamInferResponse: a response of a request in flight, maybe its final one.

    `finish` ends a request (default: the transport's `_finish`, on the loop thread); a
    reader thread passes one that hands the end to the loop thread. Only appends to the
    request's own response list happen here otherwise, so either thread may call this.
    """
    end = finish or transport._finish
    if not transport.cfg.token_output:  # counting tokens needs the outputs' shapes: full parse
        scanned = scan_response(raw)
        if scanned is not None:
            rid, outputs, final = scanned
            req = transport.inflight.get(rid)
            if req is not None:
                transport.responded(req, now, outputs)
                if final:
                    end(rid, req, now, 0, "")
            return
    global _parse
    if _parse is None:
        from tritonclient.grpc import service_pb2

        _parse = service_pb2.ModelStreamInferResponse.FromString
    msg = _parse(raw)
    resp = msg.infer_response
    inflight = transport.inflight
    req = inflight.get(resp.id)
    if msg.error_message:
        rid = resp.id
        if req is None and inflight:  # errors may come without the id
            rid = next(iter(inflight))
            req = inflight[rid]
        if req is not None:
            end(rid, req, now, STATUS_STREAM_ERROR, msg.error_message)
        return
    if req is None:
        return
    transport.responded(req, now, bool(resp.outputs))
    if resp.outputs:
        token_output = transport.cfg.token_output
        if token_output:
            for out in resp.outputs:
                if out.name == token_output:
                    req.tokens += math.prod(out.shape)
    param = resp.parameters.get(_FINAL)
    if param is not None and param.bool_param:
        end(resp.id, req, now, 0, "")


def _aio_compression(cfg: StreamConfig) -> Any:
    if not cfg.compression:
        return None
    import grpc

    return grpc.Compression.Gzip if cfg.compression == "gzip" else grpc.Compression.Deflate


def grpc_stream_request(payload: bytes, rid: str, seq: SeqFlags | None) -> bytes:
    """A prebuilt ModelInferRequest with its id, final-response flag and sequence flags appended."""
    if seq is None:
        return payload + request_suffix(rid)
    return payload + request_suffix(rid, sequence_id=seq[0], start=seq[1], end=seq[2])


class AioStreamTransport(StreamTransport):
    """Streamed requests on one grpc.aio bidirectional stream, replaced when the server breaks it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, ledger: Ledger, cfg: StreamConfig) -> None:
        super().__init__(loop, ledger, cfg)
        self._channel: Any = None
        self._call: Any = None
        self._outq: asyncio.Queue[bytes] = asyncio.Queue()
        self._fresh = False  # the current stream has not answered yet

    async def _open(self) -> None:
        if self._channel is None:
            await self._new_channel().channel_ready()
        self._ensure_call()

    def _new_channel(self) -> Any:
        import grpc.aio

        self._channel = grpc.aio.insecure_channel(
            f"{self.cfg.host}:{self.cfg.port}",
            options=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)],
        )
        return self._channel

    def _ensure_call(self) -> None:
        if self._call is not None and not self._call.done():
            return
        if self._channel is None:
            self._new_channel()
        method = self._channel.stream_stream(STREAM_INFER)  # raw bytes both ways
        self._call = method(
            metadata=tuple((k.lower(), v) for k, v in self.cfg.headers) or None, compression=_aio_compression(self.cfg)
        )
        self._fresh = True
        self._outq = asyncio.Queue()
        self.spawn(self._read(self._call))
        self.spawn(self._write(self._call, self._outq))

    def _request(self, rid: str, index: int, seq: SeqFlags | None) -> bytes:
        return grpc_stream_request(self.cfg.payloads[index], rid, seq)

    def _transmit(self, rid: str, data: bytes) -> None:
        # One writer drains a FIFO (a stream takes one write at a time): the order of sends
        # on the stream is the order of these calls, which keeps a sequence's steps in order.
        self._ensure_call()
        req = self.inflight.get(rid)
        if req is not None:
            req.call = self._call
        self._outq.put_nowait(data)

    async def _write(self, call: Any, queue: asyncio.Queue[bytes]) -> None:
        try:
            while True:
                await call.write(await queue.get())
        except asyncio.CancelledError:
            raise
        except Exception as err:  # the stream broke: the reader fails what is in flight
            self.ledger.note(STATUS_CONNECTION_CLOSED, str(err))

    async def _read(self, call: Any) -> None:
        status, message = STATUS_CONNECTION_CLOSED, "the server closed the stream"
        try:
            async for raw in call:
                if self._fresh and call is self._call:
                    self._fresh = False
                    self.ledger.connection_opened()
                on_stream_message(self, raw, perf_counter_ns())
        except asyncio.CancelledError:
            return
        except Exception as err:
            code = getattr(err, "code", None)
            if callable(code):
                try:
                    status = GRPC_STATUS_BASE + int(code().value[0])
                except Exception:
                    pass
            message = str(err)
        if call is self._call:  # not one perfkit closed
            # A fresh channel for the next stream: the broken one's channel would wait out
            # grpc's reconnect backoff (1 s and growing), failing every call meanwhile.
            self._call, channel, self._channel = None, self._channel, None
            self.spawn(channel.close())
            self._stream_ended(status, message)
        else:
            # A request sent meanwhile found this call done and opened the next one before
            # this reader woke: what was written to this call still fails here, not never.
            self._stream_ended(status, message, replaced=call)

    async def _close_stream(self) -> None:
        call, self._call = self._call, None
        if call is not None:
            call.cancel()
        await self.cancel_tasks()

    async def close(self) -> None:
        await super().close()
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

"""Requests to an OpenAI-compatible server: `/v1/chat/completions`, `/v1/completions`, `/v1/embeddings`.

The wire, as OpenAI's API reference and perf_analyzer 2.60's openai client backend
(src/client_backend/openai/openai_client.cc: one HTTP POST per request, `stream: true`
answered as server-sent events whose `data: [DONE]` ends the stream) have it:

  - a streamed answer is `text/event-stream`, chunked (or ended by the connection's close):
    one `data: {...}` event per chunk; a chunk whose `choices[0].delta.content` (chat) or
    `choices[0].text` (completions) is non-empty carries output, and its arrival is one
    response (a token, for a server that streams a token per chunk); the role-only first chunk
    of a chat stream carries none. With `stream_options: {"include_usage": true}` the last
    chunk before [DONE] holds `usage` (prompt_tokens, completion_tokens);
  - an answer that is not streamed is one JSON object, its `usage` beside its choices;
  - a failure is an HTTP status, or an event whose object has an "error" key.

Each request's one record carries its responses' arrival times, its output tokens (usage's
completion_tokens where the server gives them, else the chunks that carried output) and its
input tokens as the server reported them (usage's prompt_tokens, -1 where none). The chunks are
read without a JSON parse: only the text field's first byte and an "error" or "usage" key are
looked at, and only a chunk holding usage is parsed (benchmarks/sse_parse.py measures it).
One keep-alive connection carries one request at a time; requests are built once (bytes).
Unlike perf_analyzer's client, which takes each block of bytes curl hands it as one response
and does not stitch events split across blocks (its ResponseHandler's TODO TMA-1666), perfkit
splits the stream into events (`_sse`) and times each event that carries text.
"""

from __future__ import annotations

import asyncio
import json
from time import perf_counter_ns

from perfkit.loadgen._keepalive import KeepAliveConn, KeepAlivePool
from perfkit.loadgen._ledger import Ledger
from perfkit.loadgen._sse import DONE, SseParser
from perfkit.loadgen._stream_parts import _Req
from perfkit.loadgen._stream_transport import SeqFlags, StreamConfig
from perfkit.records import STATUS_CONNECTION_CLOSED, STATUS_PROTOCOL, STATUS_STREAM_ERROR

_TEXT_KEYS = (b'"content":', b'"text":')


def carries_text(data: bytes) -> bool:
    """Whether a streamed chunk's JSON carries output text: its content (chat) or text (completions)
    is a non-empty string. Looks at bytes only (no JSON parse); `"content":null` and `""` carry none."""
    for key in _TEXT_KEYS:
        i = data.find(key)
        while i >= 0:
            j = i + len(key)
            while j < len(data) and data[j] == 0x20:
                j += 1
            if j + 1 < len(data) and data[j] == 0x22 and data[j + 1] != 0x22:  # '"' then not '"'
                return True
            i = data.find(key, j)
    return False


def read_usage(data: bytes | str) -> tuple[int, int] | None:
    """(prompt_tokens, completion_tokens) of a JSON object's `usage`, -1 for a count it lacks; None without usage."""
    try:
        obj = json.loads(data)
    except ValueError:
        return None
    usage = obj.get("usage") if isinstance(obj, dict) else None
    if not isinstance(usage, dict):
        return None
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return (prompt if isinstance(prompt, int) else -1, completion if isinstance(completion, int) else -1)


class _OpenAIConn(KeepAliveConn):
    """One keep-alive connection; reads one response at a time (head, then a chunked, sized or closed body)."""

    def __init__(self, eng: OpenAITransport) -> None:
        super().__init__(eng)
        self.eng: OpenAITransport = eng
        self.req: _Req | None = None
        self.head_done = False
        self.code = 0
        self.chunked = False
        self.need = -1  # sized body: bytes left; -1: until the connection closes (or chunked)
        self.stream = False  # text/event-stream
        self.sse = SseParser()
        self.body = bytearray()  # a body that is not an event stream (a JSON answer, an error)
        self.chunks = 0  # chunks that carried text
        self.last = False

    def begin(self, rid: str) -> None:
        self.req = self.eng.inflight.get(rid)
        self.head_done = False
        self.chunks = 0
        self.sse.reset()
        self.body.clear()

    def _step(self, now: int) -> bool:
        buf = self.buf
        if not self.head_done:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return False
            head = bytes(buf[:end]).lower()
            del buf[: end + 4]
            try:
                self.code = int(head[9:12])
            except ValueError:
                self._done(now, STATUS_PROTOCOL, f"not an HTTP response: {head[:80]!r}")
                return False
            self.head_done = True
            self.chunked = b"transfer-encoding: chunked" in head
            self.stream = b"text/event-stream" in head
            self.last = b"connection: close" in head  # the server closes after this answer: no reuse
            i = head.find(b"content-length:")
            self.need = -1
            if i >= 0 and not self.chunked:
                stop = head.find(b"\r\n", i)
                self.need = int(head[i + 15 : stop if stop > 0 else None])
            return True
        if self.chunked:
            line_end = buf.find(b"\r\n")
            if line_end < 0:
                return False
            size = int(bytes(buf[:line_end]).split(b";")[0], 16)
            if len(buf) < line_end + 2 + size + 2:
                return False
            if size == 0:
                del buf[: line_end + 4]
                self._complete(now)
                return False
            self._body(buf[line_end + 2 : line_end + 2 + size], now)
            del buf[: line_end + 2 + size + 2]
            return True
        if self.need >= 0:
            take = min(self.need, len(buf))
            self._body(buf[:take], now)
            del buf[:take]
            self.need -= take
            if self.need == 0:
                self._complete(now)
            return False
        self._body(buf, now)  # ended by the connection's close
        buf.clear()
        return False

    def _body(self, part: bytearray, now: int) -> None:
        if not (self.stream and self.code == 200):
            self.body += part
            return
        req = self.req
        if req is None:
            return
        for data in self.sse.feed(part):
            if data == DONE:
                continue
            if b'"error"' in data:
                self.eng.ledger.note(STATUS_STREAM_ERROR, data[:300].decode(errors="replace"))
                req.failed = True
            elif carries_text(data):
                req.responses.append(now)
                self.chunks += 1
            if b'"usage"' in data:
                self._usage(req, data)

    def _usage(self, req: _Req, data: bytes | bytearray) -> None:
        got = read_usage(bytes(data))
        if got is not None:
            prompt, completion = got
            if prompt >= 0:
                req.input_tokens = prompt
            if completion >= 0:
                req.tokens = completion

    def _complete(self, now: int, reuse: bool = True) -> None:
        req = self.req
        if self.code != 200:
            self._done(now, self.code, f"HTTP {self.code}: {self.body[:240].decode(errors='replace')}", reuse)
            return
        if req is not None:
            if not self.stream:  # one JSON answer: one response, its usage beside its choices
                req.responses.append(now)
                self._usage(req, self.body)
                self.chunks = 1
            if req.tokens == 0:
                req.tokens = self.chunks  # no usage: count what carried text
        self._done(now, STATUS_STREAM_ERROR if req is not None and req.failed else 0, "", reuse)

    def _done(self, now: int, status: int, message: str, reuse: bool = True) -> None:
        rid, self.rid, self.req = self.rid, None, None
        eng = self.eng
        if status == STATUS_PROTOCOL or self.last:
            # an answer perfkit could not read leaves the connection in an unknown state, and one the server
            # said it closes after is spent: a new one for the next request (perfkit's own close)
            self.closing = True
            self.transport.close()
        elif reuse:
            eng.idle.append(self)
        req = eng.inflight.get(rid or "")
        if req is not None:
            eng._finish(rid or "", req, now, status, message)

    def connection_lost(self, exc: Exception | None) -> None:
        eng = self.eng
        self.leave_pool()
        if self.rid is not None and self.head_done and not self.chunked and self.need < 0:
            self._complete(perf_counter_ns(), reuse=False)  # a body ended by the close is whole
            return
        rid, self.rid = self.rid, None
        req = eng.inflight.get(rid or "")
        if req is not None:
            eng._finish(rid or "", req, perf_counter_ns(), STATUS_CONNECTION_CLOSED, str(exc or "server closed"))


class OpenAITransport(KeepAlivePool):
    """Requests to an OpenAI-compatible endpoint: one at a time per keep-alive HTTP/1.1 connection."""

    def __init__(self, loop: asyncio.AbstractEventLoop, ledger: Ledger, cfg: StreamConfig) -> None:
        super().__init__(loop, ledger, cfg)
        self._index = 0

    def connection(self) -> KeepAliveConn:
        return _OpenAIConn(self)

    def _request(self, rid: str, index: int, seq: SeqFlags | None) -> bytes:
        self._index = index  # the next _transmit's: its record says how many input tokens it sent
        return self.cfg.payloads[index]

    def _transmit(self, rid: str, data: bytes) -> None:
        if self.cfg.input_lengths:
            self.inflight[rid].sent_tokens = self.cfg.input_lengths[self._index]
        super()._transmit(rid, data)

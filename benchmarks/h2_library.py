"""A prototype, for measurement only: the Python gRPC sender's HTTP/2 on python-hyper's `h2`.

perfkit's Python gRPC transport (`perfkit.loadgen._h2.H2Conn`) writes prebuilt frames and parses
frame headers itself; `hpack` (python-hyper) already decodes the server's header blocks. This
module puts the rest of python-hyper's stack in its place, `h2.connection.H2Connection` (its
state machine, flow control and HPACK encoder), behind the same connection class, so that both
can be measured in one run with benchmarks/ab_trees.py (CONTRIBUTING: "HTTP/2 and HPACK:
hand-written or library"). It covers unary calls (requests larger than the windows wait for
WINDOW_UPDATE); not TLS, compression or streaming.

Use: a source tree whose `sitecustomize.py` calls `install()` sends with it, e.g.
    mkdir /tmp/h2lib && git archive HEAD | tar -x -C /tmp/h2lib
    echo 'from benchmarks.h2_library import install; install()' > /tmp/h2lib/sitecustomize.py
    PERFKIT_SENDER=python .venv/bin/python benchmarks/ab_trees.py hand=. h2lib=/tmp/h2lib --cases grpc-c1,grpc-c4
Needs `pip install h2` (not a perfkit dependency).
"""

from __future__ import annotations

import collections
from time import perf_counter_ns
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.settings

from perfkit.loadgen import _h2
from perfkit.loadgen._transport import no_delay
from perfkit.records import GRPC_STATUS_BASE, STATUS_CONNECTION_CLOSED

MSG_GOAWAY = "server sent GOAWAY; request not processed"


class H2LibConn(_h2.H2Conn):
    """`_h2.H2Conn` with python-hyper's H2Connection doing the HTTP/2."""

    def __init__(self, owner: _h2.H2Transport) -> None:
        super().__init__(owner)
        config = h2.config.H2Configuration(
            client_side=True,
            header_encoding=None,
            validate_outbound_headers=False,
            normalize_outbound_headers=False,
            validate_inbound_headers=False,
        )
        self._h2 = h2.connection.H2Connection(config)
        self._request_headers = owner.header_list
        self._headers: dict[int, dict[bytes, bytes]] = {}
        self._waiting: collections.deque[list] = collections.deque()  # [sid, view, due] not yet sent whole

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        no_delay(transport, self.owner.largest_request_bytes)
        c = self._h2
        c.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: _h2._BIG_WINDOW,
            },
        )
        c.initiate_connection()
        c.increment_flow_control_window(_h2._BIG_WINDOW - 65535)
        transport.write(c.data_to_send())

    def owed(self) -> list[tuple[int, int]]:
        return list(self.streams.values())

    def forget(self) -> list[tuple[int, int]]:
        out = self.owed()
        self.streams = {}
        self._waiting.clear()
        return out

    def send(self, message: bytes, due: int) -> None:
        c = self._h2
        sid = c.get_next_available_stream_id()
        self.streams[sid] = (due, perf_counter_ns())
        c.send_headers(sid, self._request_headers)
        self._waiting.append([sid, memoryview(message), due])
        self._pump()

    def _pump(self) -> None:
        c = self._h2
        while self._waiting and not self.closed:
            entry = self._waiting[0]
            sid, view = entry[0], entry[1]
            n = min(len(view), c.local_flow_control_window(sid), c.max_outbound_frame_size)
            if n <= 0 and len(view):
                break
            last = n == len(view)
            c.send_data(sid, view[:n].tobytes(), end_stream=last)
            entry[1] = view[n:]
            if not last:
                continue
            self._waiting.popleft()
        data = c.data_to_send()
        if data:
            self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        c = self._h2
        try:
            events = c.receive_data(data)
        except Exception as err:  # a protocol error: the connection is unusable
            kind = "HPACK" if "header block" in str(err) else "HTTP/2"
            self.owner.ledger.note(_h2.STATUS_PROTOCOL, f"{kind}: {err}")
            self.owner.failed(self, _h2.STATUS_PROTOCOL, f"{kind}: {err}")
            return
        for ev in events:
            if isinstance(ev, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                self._headers.setdefault(ev.stream_id, {}).update((bytes(k), bytes(v)) for k, v in ev.headers)
            elif isinstance(ev, h2.events.DataReceived):
                if ev.flow_controlled_length:
                    c.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded):
                self._end(ev.stream_id, self._headers.pop(ev.stream_id, {}))
            elif isinstance(ev, h2.events.StreamReset):
                self._headers.pop(ev.stream_id, None)
                entry = self.streams.pop(ev.stream_id, None)
                if entry is not None:
                    message = f"stream reset by the server (HTTP/2 error {int(ev.error_code)})"
                    self.owner.done(entry[0], entry[1], perf_counter_ns(), STATUS_CONNECTION_CLOSED, message)
            elif isinstance(ev, h2.events.RemoteSettingsChanged):
                if not self.settled.done():
                    self.settled.set_result(None)
            elif isinstance(ev, h2.events.ConnectionTerminated):
                self._goaway(ev.last_stream_id or 0)
            if self.closed:
                return
        self._pump()

    def _end(self, sid: int, headers: dict[bytes, bytes]) -> None:
        entry = self.streams.pop(sid, None)
        if entry is None:
            return
        status, message = 0, ""
        http_status = headers.get(b":status", b"200")
        grpc_status = headers.get(b"grpc-status", b"0")
        if http_status != b"200":
            status = int(http_status)
        elif grpc_status != b"0":
            status = GRPC_STATUS_BASE + int(grpc_status)
        if status:
            message = headers.get(b"grpc-message", b"").decode(errors="replace") or "gRPC call failed"
        self.owner.done(entry[0], entry[1], perf_counter_ns(), status, message)
        if self.goaway and not self.streams:
            self.close()

    def _goaway(self, last_sid: int) -> None:
        self.goaway = True
        self.owner.retire(self)
        now = perf_counter_ns()
        for sid in [s for s in self.streams if s > last_sid]:
            due, sent = self.streams.pop(sid)
            self.owner.done(due, sent, now, STATUS_CONNECTION_CLOSED, MSG_GOAWAY)
        if not self.streams:
            self.close()


def _header_list(authority: str, compression: str, metadata: tuple[tuple[str, str], ...], https: bool) -> list:
    """The request's fields, as `_h2.header_block` encodes them."""
    fields = [
        (b":method", b"POST"),
        (b":scheme", b"https" if https else b"http"),
        (b":path", _h2.GRPC_INFER.encode()),
        (b":authority", authority.encode()),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
    ]
    if compression:
        fields.append((b"grpc-encoding", compression.encode()))
    return fields + [(k.lower().encode(), v.encode()) for k, v in metadata]


def install() -> None:
    """Make `_h2.H2Transport` open H2LibConn connections in this process."""
    original_init = _h2.H2Transport.__init__

    def init(self: _h2.H2Transport, *args: Any, **kw: Any) -> None:
        original_init(self, *args, **kw)
        compression = args[5] if len(args) > 5 else kw.get("compression", "")
        self.header_list = _header_list(
            f"{self.host}:{self.port}", compression, kw.get("metadata", ()), kw.get("tls") is not None
        )

    _h2.H2Transport.__init__ = init  # type: ignore[method-assign]  # a measurement prototype's hook
    _h2.H2Conn = H2LibConn  # type: ignore[misc]  # H2Transport._open makes its connections by this name

"""gRPC through grpc.aio: the reference transport (tritonclient's own stack), one task per call.

Costs far more client CPU per call than the hand-written HTTP/2 path (`_h2`); kept as the
fallback a user can choose (`EngineConfig.transport="grpc-aio"`) and as a cross-check of
the fast path. Raw-bytes (de)serializers: no protobuf work per call. grpc.aio reconnects
by itself, so reconnects are not counted here.
"""

from __future__ import annotations

import asyncio
from time import perf_counter_ns
from typing import Any

from perfkit.loadgen._ledger import Ledger
from perfkit.loadgen._transport import Transport
from perfkit.records import GRPC_STATUS_BASE, STATUS_CONNECTION_CLOSED, STATUS_UNFINISHED

_GRPC_INFER = "/inference.GRPCInferenceService/ModelInfer"
_OPTIONS = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]


class AioTransport(Transport):
    """One grpc.aio channel; each request is a task awaiting a unary call."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, ledger: Ledger, payloads: tuple[bytes, ...], host: str, port: int
    ) -> None:
        super().__init__(loop, ledger, payloads)
        self.target = f"{host}:{port}"
        self._channel: Any = None
        self._call: Any = None
        self._abort_message = ""

    async def prepare(self, closed_loop: bool, share: int, rate_rps: float) -> None:
        if self._channel is None:
            import grpc.aio  # noqa: PLC0415  (heavy import; only this transport needs it)

            self._channel = grpc.aio.insecure_channel(self.target, options=_OPTIONS)
            self._call = self._channel.unary_unary(_GRPC_INFER)
            try:
                await asyncio.wait_for(self._channel.channel_ready(), 10)
            except asyncio.TimeoutError:
                pass  # calls will fail with UNAVAILABLE and be recorded as such

    def submit(self, due_ns: int) -> None:
        self.spawn(self._one(due_ns))

    async def _one(self, due: int) -> None:
        sent = perf_counter_ns()
        message = ""
        try:
            await self._call(self.next_payload())
            status = 0
        except asyncio.CancelledError:
            # Only abort_in_flight cancels calls: the request is owed an "unfinished" record.
            self.ledger.finish(due, sent, perf_counter_ns(), STATUS_UNFINISHED, self._abort_message)
            raise
        except Exception as err:  # grpc.aio.AioRpcError, or the channel closing
            status, message = _grpc_status(err)
        self.ledger.finish(due, sent, perf_counter_ns(), status, message)
        self.on_done(status)

    async def abort_in_flight(self, message: str) -> None:
        self._abort_message = message
        await self.cancel_tasks()  # each cancelled call records itself as unfinished

    async def close(self) -> None:
        await self.cancel_tasks()
        if self._channel is not None:
            await self._channel.close()
            self._channel = None


def _grpc_status(err: Exception) -> tuple[int, str]:
    code = getattr(err, "code", None)
    try:
        status = GRPC_STATUS_BASE + int(code().value[0]) if callable(code) else STATUS_CONNECTION_CLOSED
    except Exception:
        status = STATUS_CONNECTION_CLOSED
    details = getattr(err, "details", None)
    return status, str(details() if callable(details) else err)[:300]

"""Pieces of the streaming transports: request wire suffixes, per-request state, trace state, Samples."""

from __future__ import annotations

import collections

import numpy as np

from perfkit.records import Samples


def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1  # negative int64 values are 10-byte two's complement varints
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _len_field(number: int, data: bytes) -> bytes:
    return _varint((number << 3) | 2) + _varint(len(data)) + data


def _param(key: str, value: bool | int | str) -> bytes:
    # ModelInferRequest.parameters (field 4) is map<string, InferParameter>: each entry is a
    # message {1: key, 2: value}; InferParameter's oneof: 1 bool, 2 int64, 3 string.
    if isinstance(value, bool):
        encoded = b"\x08" + (b"\x01" if value else b"\x00")
    elif isinstance(value, int):
        encoded = b"\x10" + _varint(value)
    else:
        encoded = _len_field(3, value.encode())
    return _len_field(4, _len_field(1, key.encode()) + _len_field(2, encoded))


def request_suffix(
    request_id: str, *, sequence_id: int | str | None = None, start: bool = False, end: bool = False
) -> bytes:
    """Protobuf fields appended to a serialized ModelInferRequest: its id, final-response and sequence flags."""
    out = _len_field(3, request_id.encode()) + _param("triton_enable_empty_final_response", True)
    if sequence_id is not None:
        out += _param("sequence_id", sequence_id)
        out += _param("sequence_start", start) + _param("sequence_end", end)
    return out


class _Req:
    __slots__ = (
        "call", "counted", "due", "failed", "input_tokens", "responses", "sent", "sent_tokens", "slot", "tokens"
    )  # fmt: skip

    def __init__(self, due: int, slot: int) -> None:
        self.call: object = None  # the stream it was written to, where a transport replaces streams
        self.due = due
        self.sent = -1
        self.slot = slot
        self.failed = False
        self.tokens = 0
        self.input_tokens = -1  # as the server reported them (an OpenAI response's usage); -1: not reported
        self.sent_tokens = -1  # input tokens sent (an OpenAI prompt's length under its tokenizer); -1: not known
        self.responses: list[int] = []  # arrival times of the responses that carried outputs
        self.counted = 0  # every response, the flag-only final one too (only with a request period)


class _Trace:
    """Replay state: the next entry, and per session its turns in flight, waiting and sent."""

    def __init__(self, sessions: tuple[int, ...]) -> None:
        self.sessions = sessions
        self.next = 0
        self.busy: set[int] = set()
        self.waiting: dict[int, collections.deque[tuple[int, int]]] = {}
        self.turns_sent: dict[int, int] = {}
        self.turns = collections.Counter(s for s in sessions if s >= 0)
        self.closed = False

    def waiting_count(self) -> int:
        return sum(len(q) for q in self.waiting.values())


def stream_samples(
    records: list[tuple[int, int, int, int, int]],
    examples: dict[int, str],
    reconnects: int,
    streamed: dict[int, tuple[list[int], int, tuple[int, int]]],
    counted: bool = False,
    reported: bool = False,
) -> Samples:
    """Samples of streamed requests: per request its responses' arrival times (and tokens when counted;
    its input tokens as sent and as the server reported them when `reported`, -1 where not known)."""
    n = len(records)
    responses = np.empty(n, dtype=object)
    no_responses = np.empty(0, dtype=np.int64)
    tokens = np.zeros(n, dtype=np.int64) if counted else None
    inputs = np.full((n, 2), -1, dtype=np.int64) if reported else None
    for i in range(n):
        got = streamed.get(i)
        responses[i] = np.array(got[0], dtype=np.int64) if got is not None else no_responses
        if tokens is not None and got is not None:
            tokens[i] = got[1]
        if inputs is not None and got is not None:
            inputs[i] = got[2]
    arr = np.array(records, dtype=np.int64).reshape(n, 5)
    return Samples(
        arr[:, 0].copy(),
        arr[:, 1].copy(),
        arr[:, 2].copy(),
        arr[:, 3].astype(np.int32),
        examples,
        response_ns=responses,
        output_tokens=tokens,
        input_tokens=inputs,
        reconnects=reconnects,
    )

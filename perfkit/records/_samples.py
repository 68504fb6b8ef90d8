"""Raw per-request samples from the load generator, and the request outcome codes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Request outcome codes shared by the load generator and the recorder.
# 0 is success; HTTP errors keep their status code (400..599); gRPC errors are 1000 + status
# code; negative codes are client-side outcomes.
STATUS_OK = 0
STATUS_CONNECTION_CLOSED = -1
STATUS_CONNECTION_REFUSED = -2
STATUS_DROPPED = -3  # open loop: could not be sent (max outstanding reached)
STATUS_UNFINISHED = -4  # still in flight when the level's drain timeout ran out
STATUS_PROTOCOL = -5  # a response perfkit could not parse
STATUS_STREAM_ERROR = -6  # a streamed request answered with an error message on the stream
GRPC_STATUS_BASE = 1000
_CLIENT_STATUS_NAMES = {
    STATUS_CONNECTION_CLOSED: "connection_closed",
    STATUS_CONNECTION_REFUSED: "connection_refused",
    STATUS_DROPPED: "dropped",
    STATUS_UNFINISHED: "unfinished",
    STATUS_PROTOCOL: "protocol_error",
    STATUS_STREAM_ERROR: "stream_error",
}


# Triton answers a request it will not run (a full queue: "Exceeds maximum queue size" in
# triton-inference-server/core src/scheduler_utils.cc PriorityQueue::PolicyQueue::Enqueue; a queue
# timeout under timeout_action REJECT: "Request timeout expired" in src/dynamic_batch_scheduler.cc)
# with Status::Code::UNAVAILABLE, which the HTTP endpoint sends as 503 (server src/http_server.cc
# HttpCodeFromError: EVHTP_RES_SERVUNAVAIL) and the gRPC endpoint as status 14 (UNAVAILABLE). Those
# outcomes are admission control's rejections, counted apart from other failures.
REJECTED_STATUS_NAMES = frozenset({"http_503", "grpc_14"})


def status_name(code: int) -> str:
    """Human name of an outcome code: 'http_503', 'grpc_14', 'dropped'..."""
    if code in _CLIENT_STATUS_NAMES:
        return _CLIENT_STATUS_NAMES[code]
    if code >= GRPC_STATUS_BASE:
        return f"grpc_{code - GRPC_STATUS_BASE}"
    return f"http_{code}"


@dataclass(frozen=True)
class Samples:
    """Raw per-request timestamps (one monotonic clock, ns) from the load generator.

    due_ns is -1 in closed loop; sent_ns is -1 for dropped sends. Arrays are numpy int64
    (status int32), all of one length. Streamed requests (decoupled models) also carry
    response_ns: an object array holding, per request, an int64 array of the arrival times
    of its non-empty responses (tokens); done_ns is then its final response. None for
    unary requests.
    """

    due_ns: Any
    sent_ns: Any
    done_ns: Any
    status: Any
    error_examples: dict[int, str] = field(default_factory=dict)
    response_ns: Any = None
    output_tokens: Any = None  # per request: elements of a declared output tensor over its responses
    # per request (int64, shape (n, 2)): its input tokens as sent (under the tokenizer) and as the server
    # reported them (an OpenAI-compatible response's usage), -1 where not known; None for Triton's protocols
    input_tokens: Any = None
    reconnects: int = 0  # connections that died under the load generator and were replaced
    model: Any = None  # a traffic mix: per request, its model's index in ProfileSpec.mix (int16); else None

    def __len__(self) -> int:
        return len(self.done_ns)

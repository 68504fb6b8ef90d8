"""The record-keeping of one engine: where the accounting invariant is kept.

THE INVARIANT. Every request the schedule makes due yields exactly one record:
  - completed (status 0),
  - failed, by kind (HTTP status, 1000 + gRPC status, connection closed/refused,
    protocol error), with the server's or the transport's message kept as the example,
  - dropped (open loop, no capacity: `max_outstanding` requests already in flight), or
  - unfinished (still in flight when the level's drain ran out).

How it is kept:
  - a loop mode calls `begin()` for each request it hands to a transport, or `unsent()`
    for a request it could not hand over (dropped);
  - a transport calls `finish()` exactly once for each request it was handed, whatever
    happens to it (answered, connection lost, reset, GOAWAY, refused, aborted at stop);
  - so `in_flight` == requests handed over and not yet recorded, and after a level's
    stop it is 0. `Engine.stop` checks that and logs any breach.

Everything here runs on the engine's loop thread only (no locks); `swap()` hands the
records over to the caller's thread by replacing the containers, never mutating them
after. Transports reach the examples through the ledger, never by holding the dict,
so a swap cannot leave a connection writing into a dict nobody reads.
"""

from __future__ import annotations

from time import perf_counter_ns

# (due_ns, sent_ns, done_ns, status, model); due -1 closed loop, sent -1 unsent; model: the index of the
# request's model in a traffic mix (`_mix`), 0 with one model
Record = tuple[int, int, int, int, int]
# a streamed request's extras: its responses' arrival times, output tokens, (input tokens sent, reported)
Streamed = tuple[list[int], int, tuple[int, int]]


class Ledger:
    """One engine's records, error examples and connection counters."""

    __slots__ = ("examples", "in_flight", "lost_unreplaced", "reconnects", "records", "streamed")

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.examples: dict[int, str] = {}
        self.in_flight = 0
        self.reconnects = 0
        # connections that died under us and were not replaced yet (kept across drains)
        self.lost_unreplaced = 0
        # streamed requests: record index -> (response arrival times, output tokens, (input tokens sent,
        # input tokens the server reported), -1 where not known)
        self.streamed: dict[int, Streamed] = {}

    def begin(self) -> None:
        """A request was handed to a transport: it now owes exactly one `finish`."""
        self.in_flight += 1

    def finish(self, due_ns: int, sent_ns: int, done_ns: int, status: int, message: str = "", model: int = 0) -> None:
        """Record the one outcome of a request handed over with `begin` (to the mix's model `model`)."""
        self.in_flight -= 1
        self.records.append((due_ns, sent_ns, done_ns, status, model))
        if status and status not in self.examples:
            self.examples[status] = message[:300]

    def finish_streamed(
        self,
        due_ns: int,
        sent_ns: int,
        done_ns: int,
        status: int,
        message: str,
        response_ns: list[int],
        tokens: int,
        input_tokens: tuple[int, int] = (-1, -1),
    ) -> None:
        """`finish` for a streamed request: its one record, with its responses' arrival times and tokens
        (and its input tokens as sent and as the server reported them, an OpenAI-compatible response's `usage`)."""
        if response_ns or tokens or input_tokens != (-1, -1):
            self.streamed[len(self.records)] = (response_ns, tokens, input_tokens)
        self.finish(due_ns, sent_ns, done_ns, status, message)

    def unsent(self, due_ns: int, status: int, message: str, model: int = 0) -> None:
        """Record a request that was due but never handed to a transport (dropped)."""
        self.records.append((due_ns, -1, perf_counter_ns(), status, model))
        if status not in self.examples:
            self.examples[status] = message

    def note(self, status: int, message: str) -> None:
        """Keep a message as the example for a status if none is kept yet."""
        if status not in self.examples:
            self.examples[status] = message[:300]

    def connection_lost(self) -> None:
        """A connection died that perfkit did not close (peer close, reset, GOAWAY)."""
        self.lost_unreplaced += 1

    def connection_opened(self) -> None:
        """A connection opened: counts as a reconnect if it replaces one that died."""
        if self.lost_unreplaced > 0:
            self.lost_unreplaced -= 1
            self.reconnects += 1

    def reset(self) -> None:
        """A new level: nothing recorded, nothing in flight."""
        self.records, self.examples, self.streamed = [], {}, {}
        self.in_flight = 0
        self.reconnects = 0

    def swap(self) -> tuple[list[Record], dict[int, str], int]:
        """Hand over what was recorded since the last swap (records, examples, reconnects)."""
        out = (self.records, self.examples, self.reconnects)
        self.records, self.examples, self.reconnects, self.streamed = [], {}, 0, {}
        return out

    def swap_streamed(self) -> tuple[list[Record], dict[int, str], int, dict[int, Streamed]]:
        """`swap`, with the streamed requests' responses by record index."""
        streamed = self.streamed
        return (*self.swap(), streamed)

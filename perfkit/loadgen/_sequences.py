"""Sequence (stateful model) bookkeeping: IDs, lengths, flags, data streams — perf_analyzer's rules.

Semantics follow perf_analyzer's docs/cli.md ("Sequence Model Options") and
src/sequence_manager.cc:
- `--sequence-length` L with `--sequence-length-variation` V%: each new sequence is
  L + a uniform random offset in [-V%, +V%] of L requests long (at least 1).
- With user input data, a new sequence takes the next data stream and (unless a
  length was given) is as long as that stream's steps.
- `--sequence-id-range start:end`: IDs go start, start+1, ... wrapping before end
  (exclusive); an ID still in use by another live sequence is not reused (the slot
  keeps its old ID instead, as perf_analyzer does).
- A sequence's first request carries sequence_start, its last sequence_end.
- `--num-of-sequences`: the number of live sequences in open loop (request rate);
  in closed loop each concurrency slot is one live sequence.
- `--serial-sequences`: at most one request in flight per sequence.

Pure and deterministic (seeded): testable without a server.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from perfkit.errors import UsageError


@dataclass(frozen=True)
class SequenceSpec:
    """How sequences are formed; picklable."""

    length: int = 20
    length_specified: bool = False
    length_variation_pct: float = 20.0
    id_start: int = 1
    id_end: int | None = None  # exclusive
    num_sequences: int = 4
    serial: bool = False
    string_ids: bool = False
    # data streams: per stream, the indices of its steps' payloads (perf_analyzer-format files)
    streams: tuple[tuple[int, ...], ...] = ()


@dataclass
class SequenceSlot:
    """One live sequence."""

    seq_id: int = 0
    remaining: int = 0
    length: int = 0
    step: int = 0
    stream: int = 0
    in_flight: int = 0
    started: bool = False


@dataclass
class SequenceManager:
    """Hands out the next (payload index, sequence ID, start, end) for a slot."""

    spec: SequenceSpec
    slots: int
    seed: int = 0
    first_id: int = 0  # how many IDs earlier levels of the run issued (IDs continue from there)
    _slots: list[SequenceSlot] = field(default_factory=list)
    _next_id: int = 0
    _next_stream: int = 0

    def __post_init__(self) -> None:
        self._next_id = self.first_id
        span = self.id_span
        if span is not None and span < self.slots:
            raise UsageError(
                f"--sequence-id-range {self.spec.id_start}:{self.spec.id_end} holds {span} IDs but "
                f"{self.slots} sequences are live at once",
                hint="widen the range or lower the concurrency / --num-of-sequences",
            )
        self._rng = random.Random(self.seed)
        self._slots = [SequenceSlot() for _ in range(self.slots)]

    @property
    def ids_issued(self) -> int:
        return self._next_id

    @property
    def id_span(self) -> int | None:
        if self.spec.id_end is None:
            return None
        return max(0, self.spec.id_end - self.spec.id_start)

    def slot(self, index: int) -> SequenceSlot:
        return self._slots[index]

    def _new_id(self, old: int) -> int:
        span = self.id_span
        n = self._next_id
        self._next_id += 1
        candidate = self.spec.id_start + (n % span if span else n)
        if any(s.started and s.remaining > 0 and s.seq_id == candidate for s in self._slots):
            return old
        return candidate

    def _random_length(self) -> int:
        base = self.spec.length
        offset = int((2.0 * self._rng.random() - 1.0) * self.spec.length_variation_pct / 100.0 * base)
        return max(1, base + offset)

    def _start(self, slot: SequenceSlot) -> None:
        slot.seq_id = self._new_id(slot.seq_id)
        slot.step = 0
        slot.started = True
        if self.spec.streams:
            slot.stream = self._next_stream % len(self.spec.streams)
            self._next_stream += 1
            steps = len(self.spec.streams[slot.stream])
            slot.length = self._random_length() if self.spec.length_specified else steps
        else:
            slot.length = self._random_length()
        slot.remaining = slot.length

    def next_request(self, index: int, payload_count: int) -> tuple[int, int, bool, bool]:
        """The next step of slot `index`: (payload index, sequence ID, start flag, end flag)."""
        slot = self._slots[index]
        if slot.remaining <= 0:
            self._start(slot)
        start = slot.step == 0
        end = slot.remaining == 1
        if self.spec.streams:
            steps = self.spec.streams[slot.stream]
            payload = steps[slot.step % len(steps)]
        else:
            payload = slot.step % max(1, payload_count)
        slot.step += 1
        slot.remaining -= 1
        return payload, slot.seq_id, start, end

    def wire_id(self, seq_id: int) -> int | str:
        """The correlation ID as sent: numeric, or its decimal string with string IDs."""
        return str(seq_id) if self.spec.string_ids else seq_id

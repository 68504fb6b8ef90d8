"""StreamTransport's bookkeeping under the shared loop modes and ledger, without a server.

A fake transport records what would go on the wire and answers when the test says so, so
the rules are checked exactly: one record per request, sequence steps in order per
correlation ID, live sequences ended at the level's end, waiting steps dropped, trace
turns of one session one at a time, a broken stream counted as a reconnect.
"""

from __future__ import annotations

import asyncio
import dataclasses
from time import perf_counter_ns

from perfkit.loadgen import SequenceSpec, StreamConfig
from perfkit.loadgen._ledger import Ledger
from perfkit.loadgen._loops import ClosedLoop, OpenLoop
from perfkit.loadgen._stream_transport import SeqFlags, StreamTransport
from perfkit.records import STATUS_CONNECTION_CLOSED, STATUS_DROPPED, STATUS_UNFINISHED


class FakeStream(StreamTransport):
    def __init__(self, loop: asyncio.AbstractEventLoop, ledger: Ledger, cfg: StreamConfig) -> None:
        super().__init__(loop, ledger, cfg)
        self.wire: list[tuple[str, int, SeqFlags | None]] = []

    def _request(self, rid: str, index: int, seq: SeqFlags | None) -> bytes:
        self.wire.append((rid, index, seq))
        return b""

    def _transmit(self, rid: str, data: bytes) -> None:
        pass

    def answer(self, rid: str, responses: int = 2) -> None:
        req = self.inflight[rid]
        req.responses.extend(perf_counter_ns() for _ in range(responses))
        self._finish(rid, req, perf_counter_ns(), 0)


def _cfg(**kw) -> StreamConfig:
    return StreamConfig("127.0.0.1", 1, (b"a", b"b", b"c"), **kw)


def test_closed_loop_sequences_keep_their_steps_in_order_and_end_at_the_level_end():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        ledger = Ledger()
        spec = SequenceSpec(length=3, length_variation_pct=0, id_start=100)
        t = FakeStream(loop, ledger, _cfg(sequences=spec))
        mode = ClosedLoop(t, ledger, loop, 2)
        t.on_done = mode.on_done
        await t.prepare(True, 2, 0.0)
        mode.start()
        for _ in range(4):  # answer the oldest request in flight, four times
            t.answer(next(iter(t.inflight)))
        mode.stop()
        await t.drain(loop.time() + 1)
        assert ledger.in_flight == 2  # the two steps in flight are still owed
        for rid in list(t.inflight):
            t.answer(rid)
        await t.drain(loop.time() + 1)  # now idle: live sequences get a last step flagged end
        for rid in list(t.inflight):
            t.answer(rid)
        assert ledger.in_flight == 0
        records, _, _, streamed = ledger.swap_streamed()
        assert len(records) == len(t.wire) and all(r[3] == 0 for r in records)
        assert all(len(streamed[i][0]) == 2 for i in range(len(records)))
        by_id: dict[int | str, list[tuple[bool, bool]]] = {}
        for _, _, seq in t.wire:
            assert seq is not None
            by_id.setdefault(seq[0], []).append((seq[1], seq[2]))
        for flags in by_id.values():  # each sequence: start first, end last, nothing after its end
            assert flags[0][0] and flags[-1][1]
            assert not any(start for start, _ in flags[1:]) and not any(end for _, end in flags[:-1])

    asyncio.run(main())


def test_open_loop_serial_sequences_wait_and_are_dropped_at_the_level_end():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        ledger = Ledger()
        spec = SequenceSpec(length=50, length_variation_pct=0, num_sequences=2, serial=True)
        t = FakeStream(loop, ledger, _cfg(sequences=spec))
        await t.prepare(False, 0, 100.0)
        for due in range(5):  # five due steps, two sequences, nothing answered: three wait
            ledger.begin()
            t.submit(due)
        assert len(t.wire) == 2 and ledger.in_flight == 5
        t.answer(t.wire[0][0])  # a sequence is free again: the oldest waiting step leaves
        assert len(t.wire) == 3 and t.wire[2][2] == t.wire[0][2][:1] + (False, False)
        await t.drain(loop.time() + 0.05)  # the two still waiting are dropped; two stay in flight
        await t.abort_in_flight("still in flight")
        records, examples, _, _ = ledger.swap_streamed()
        statuses = sorted(r[3] for r in records)
        assert statuses == sorted([0, STATUS_DROPPED, STATUS_DROPPED, STATUS_UNFINISHED, STATUS_UNFINISHED])
        assert sorted(r[0] for r in records) == [0, 1, 2, 3, 4]  # every due time has its one record
        assert examples[STATUS_DROPPED] and examples[STATUS_UNFINISHED]

    asyncio.run(main())


def test_trace_turns_of_a_session_go_one_at_a_time_and_drops_spend_their_entry():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        ledger = Ledger()
        payloads = (b"a", b"b", b"c", b"d")
        cfg = StreamConfig("127.0.0.1", 1, payloads, schedule_ns=(0, 0, 0, 30_000_000), sessions=(7, 7, -1, -1))
        cfg = dataclasses.replace(cfg, max_outstanding=2)
        t = FakeStream(loop, ledger, cfg)
        mode = OpenLoop(t, ledger, loop, iter(cfg.schedule_ns), perf_counter_ns(), cfg.max_outstanding)
        await t.prepare(False, 0, 0.0)
        mode.start()
        while not t.wire:  # the first tick: entries 0-2 are due at once
            await asyncio.sleep(0.001)
        # entry 0 sent; entry 1 (same session) waits for it; entry 2 finds 2 owed: dropped
        assert [w[1] for w in t.wire] == [0] and ledger.in_flight == 2
        t.answer(t.wire[0][0])
        assert [w[1] for w in t.wire] == [0, 1]  # the session's next turn left when the first ended
        t.answer(t.wire[1][0])
        while len(t.wire) < 3:  # entry 3, due 30 ms in
            await asyncio.sleep(0.001)
        assert t.wire[2][1] == 3  # the dropped entry 2 was spent, not sent in 3's place
        t.answer(t.wire[2][0])
        mode.stop()
        records, _, _, _ = ledger.swap_streamed()
        assert sorted(r[3] for r in records) == [STATUS_DROPPED, 0, 0, 0]

    asyncio.run(main())


def test_a_broken_stream_fails_what_it_carried_and_its_replacement_is_a_reconnect():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        ledger = Ledger()
        t = FakeStream(loop, ledger, _cfg())
        await t.prepare(True, 2, 0.0)
        for _ in range(2):
            ledger.begin()
            t.submit(-1)
        t._stream_ended(STATUS_CONNECTION_CLOSED, "the server closed the stream")
        assert ledger.in_flight == 0
        ledger.connection_opened()  # what a transport calls when the replacement opens
        records, examples, reconnects = ledger.swap()
        assert [r[3] for r in records] == [STATUS_CONNECTION_CLOSED] * 2
        assert examples[STATUS_CONNECTION_CLOSED] == "the server closed the stream"
        assert reconnects == 1

    asyncio.run(main())

"""A traffic mix: one engine loading several models, each request drawn for a model by weight.

`MixTransport` is a `Transport` over one sub-transport per model (each built as for one model,
with that model's payloads). The loop mode (closed or open) drives it like any transport: each
`submit` draws the next model from `MixSequence`, so in open loop the due times are split by
the mix and in closed loop each free slot takes the next model of the same sequence.

The draw is a smooth weighted round robin (the sequence nginx uses for upstream weights): over
every `sum(weights)` draws each model is drawn exactly its weight's times, spread evenly
(3:1 gives A A B A), never by chance. The run's seed picks where in the cycle a level starts.

Accounting: every sub-transport sees the engine's one ledger through a `TaggedLedger`, which
adds the model's index to each record (`Record`'s last field); the invariant of `_ledger`
holds for the whole engine (one `in_flight`, one record per request due).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from perfkit.loadgen._ledger import Ledger
from perfkit.loadgen._transport import Transport


class MixSequence:
    """Which model each next request goes to: exact by weight over every cycle of sum(weights) draws."""

    def __init__(self, weights: Sequence[int], phase: int = 0) -> None:
        if not weights or any(w <= 0 for w in weights):
            raise ValueError(f"mix weights must be positive integers, got {list(weights)}")
        self.weights = tuple(int(w) for w in weights)
        self.total = sum(self.weights)
        self._phase = phase % self.total
        self.reset()

    def reset(self) -> None:
        """Start the cycle again (each level does), `phase` draws in."""
        self._current = [0] * len(self.weights)
        for _ in range(self._phase):
            self.next()

    def next(self) -> int:
        """The index of the next request's model."""
        cur = self._current
        best = 0
        for i, w in enumerate(self.weights):
            cur[i] += w
            if cur[i] > cur[best]:
                best = i
        cur[best] -= self.total
        return best


class TaggedLedger(Ledger):
    """The engine's ledger as one model's sub-transport sees it: its records carry the model's index.

    It holds nothing itself: every call goes to the engine's ledger (transports only finish,
    note, and report connections; the loop mode begins requests on the engine's ledger).
    """

    __slots__ = ("_main", "model")

    def __init__(self, main: Ledger, model: int) -> None:  # no super().__init__: nothing is kept here
        self._main, self.model = main, model

    @property
    def in_flight(self) -> int:
        return self._main.in_flight

    @in_flight.setter
    def in_flight(self, value: int) -> None:
        self._main.in_flight = value

    def begin(self) -> None:
        self._main.begin()

    def finish(self, due_ns: int, sent_ns: int, done_ns: int, status: int, message: str = "", model: int = 0) -> None:
        self._main.finish(due_ns, sent_ns, done_ns, status, message, self.model)

    def note(self, status: int, message: str) -> None:
        self._main.note(status, message)

    def connection_lost(self) -> None:
        self._main.connection_lost()

    def connection_opened(self) -> None:
        self._main.connection_opened()


class MixTransport(Transport):
    """One engine's transport to several models: each submit goes to the next model of the mix."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        ledger: Ledger,
        subs: Sequence[Transport],
        weights: Sequence[int],
        seed: int,
    ) -> None:
        super().__init__(loop, ledger, (b"",))
        self.subs = list(subs)
        self.sequence = MixSequence(weights, phase=seed)
        self.largest_request_bytes = max(s.largest_request_bytes for s in self.subs)
        for sub in self.subs:
            sub.on_done = self._sub_done

    def _sub_done(self, status: int) -> None:
        self.on_done(status)

    async def prepare(self, closed_loop: bool, share: int, rate_rps: float) -> None:
        self.sequence.reset()
        total = self.sequence.total
        # closed loop: any slot may draw any model, so each model's transport is ready for all of them
        await asyncio.gather(
            *(sub.prepare(closed_loop, share, rate_rps * w / total) for sub, w in zip(self.subs, self.sequence.weights))
        )

    def submit(self, due_ns: int) -> None:
        self.subs[self.sequence.next()].submit(due_ns)

    def model_of_dropped(self) -> int:
        return self.sequence.next()

    async def abort_in_flight(self, message: str) -> None:
        for sub in self.subs:
            await sub.abort_in_flight(message)

    def end_level(self, closed_loop: bool) -> None:
        for sub in self.subs:
            sub.end_level(closed_loop)

    async def close(self) -> None:
        for sub in self.subs:
            await sub.close()
        await self.cancel_tasks()

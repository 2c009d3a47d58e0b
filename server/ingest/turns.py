"""Fair turns for the uploads in progress, at two places: the ingestion pool's connections
(at most INGEST_DB_POOL_MAX uploads hold one) and the statements running in the database
(at most INGEST_WRITES_AT_ONCE). When more wait, the router served the fewest records lately
gets the next turn handed back, not the next upload in arrival order. A statement's turn
stops counting after WRITE_OVERTIME_SECONDS: one waiting on rows another upload holds (its
own router's, stalled mid-body) would otherwise hold it for as long, and that upload's next
chunk could then wait for the very turn (tests/test_hostile.py).

Without them, a hundred MACs flooding at full speed (a Sybil fleet) fill the pool's queue
and an honest router's upload waits behind every one of them: 45 times its quiet time in
ops/bench/hunt_flood.py, 3-4.4 times with both turns on 2 cores (the rest is the CPU,
which the flood saturates there). The same order was tried at the CPU (one decoded piece of
one upload at a time): it won little more and cost 15 % of ingestion with 4 uploads at
once, since a piece that awaits nothing must yield to let others queue; and for a whole
upload (ops/bench/README.md): no gain this machine could tell.
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import itertools
import time
from contextlib import asynccontextmanager
from typing import AsyncIterator

WINDOW_SECONDS = 10.0  # "lately": the records counted per router are forgotten this often
WRITE_OVERTIME_SECONDS = 1.0  # a statement's turn stops counting after (INGEST_WRITES_AT_ONCE)
PATIENCE_SECONDS = 5.0  # a waiter this long goes before those served less


class Served:
    """Records each router was served lately (this window)."""

    def __init__(self, window_seconds: float = WINDOW_SECONDS):
        self._window_seconds = window_seconds
        self._window_started = time.monotonic()
        self._records: dict[str, int] = {}

    def count(self, mac: str, records: int) -> None:
        self._records[mac] = self.lately(mac) + records

    def lately(self, mac: str) -> int:
        now = time.monotonic()
        if now - self._window_started > self._window_seconds:
            self._records.clear()
            self._window_started = now
        return self._records.get(mac, 0)


class FairTurns:
    """At most `at_once` holders; waiters handed a turn least served first, then in arrival
    order, except that one waiting PATIENCE_SECONDS goes first (the longest waiting): a
    router served more than each of a stream of cheap MACs is not kept waiting for ever.
    With `overtime_seconds`, a turn held that long is handed on while its holder goes on: a
    holder stuck (a statement waiting on another upload's locks) stops counting."""

    def __init__(self, served: Served, at_once: int = 1, overtime_seconds: float | None = None,
                 patience_seconds: float = PATIENCE_SECONDS):
        self._served = served
        self._at_once = at_once
        self._overtime_seconds = overtime_seconds
        self._patience_seconds = patience_seconds
        self._holders = 0
        self._waiting: list[tuple[int, int, asyncio.Future]] = []  # (served, arrival, turn)
        self._arrived: collections.deque[tuple[float, asyncio.Future]] = collections.deque()
        self._arrivals = itertools.count()
        self._handed_out_of_order = 0  # by patience: their entries still in `_waiting`

    @asynccontextmanager
    async def turn(self, mac: str) -> AsyncIterator[None]:
        if self._holders >= self._at_once:
            handed: asyncio.Future = asyncio.get_running_loop().create_future()
            heapq.heappush(self._waiting, (self._served.lately(mac), next(self._arrivals),
                                           handed))
            self._arrived.append((time.monotonic(), handed))
            try:
                await handed
            except asyncio.CancelledError:
                if handed.done() and not handed.cancelled():
                    self._hand_on()  # handed the turn as it was cancelled: pass it on
                raise
        else:
            self._holders += 1
        handed_on = False

        def hand_on_once() -> None:
            nonlocal handed_on
            if not handed_on:
                handed_on = True
                self._hand_on()

        overtime = None if self._overtime_seconds is None else \
            asyncio.get_running_loop().call_later(self._overtime_seconds, hand_on_once)
        try:
            yield
        finally:
            if overtime is not None:
                overtime.cancel()
            hand_on_once()

    @property
    def waiting(self) -> int:
        return sum(1 for _, _, handed in self._waiting if not handed.done())

    def _hand_on(self) -> None:
        """A turn given back: to the waiter out of patience, else to the first waiter still
        waiting (one cancelled, or handed its turn by the other order, is skipped), or
        free."""
        arrived = self._arrived
        while arrived and arrived[0][1].done():
            arrived.popleft()
        if arrived and time.monotonic() - arrived[0][0] >= self._patience_seconds:
            arrived.popleft()[1].set_result(None)
            self._handed_out_of_order += 1
            if self._handed_out_of_order > len(self._waiting) // 2:  # their entries let go
                self._waiting = [entry for entry in self._waiting if not entry[2].done()]
                heapq.heapify(self._waiting)
                self._handed_out_of_order = 0
            return
        while self._waiting:
            _, _, handed = heapq.heappop(self._waiting)
            if not handed.done():
                handed.set_result(None)
                return
        self._holders -= 1

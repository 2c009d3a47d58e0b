"""Fair turns for the uploads in progress: at this process's CPU (one decoded piece of one
upload's body at a time is split, checked, summarised and handed to the writer) and at the
ingestion pool's connections (INGEST_DB_POOL_MAX uploads writing at once). When several wait,
the router served the fewest records lately goes first.

Without them, every upload in progress gets an equal share of the event loop and waits its
turn for a connection in arrival order, so a hundred MACs flooding at full speed (a Sybil
fleet) leave an honest router a hundredth of the process and a place behind each of them in
the pool's queue. With them, the honest router, which sends little, waits for at most the
piece in progress and the first connection handed back, then goes before every flooder.
The process's CPU work is one piece at a time either way (Python runs one thread): turns
change only the order. What a piece awaits inside its turn (a chunk's previous write still
being sent) holds the others back, as before; the body's reading and gzip decoding are
outside the turns.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from contextlib import asynccontextmanager
from typing import AsyncIterator

WINDOW_SECONDS = 10.0  # "lately": the records counted per router are forgotten this often


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
    order."""

    def __init__(self, served: Served, at_once: int = 1):
        self._served = served
        self._at_once = at_once
        self._holders = 0
        self._waiting: list[tuple[int, int, asyncio.Future]] = []  # (served, arrival, turn)
        self._arrivals = itertools.count()

    @asynccontextmanager
    async def turn(self, mac: str, yield_first: bool = False) -> AsyncIterator[None]:
        """`yield_first`: a turn taken at once still lets the tasks ready now ask for theirs
        before its holder goes on, so that they queue and the next turn is handed in order
        (a block that awaits nothing would otherwise always run in arrival order)."""
        if self._holders >= self._at_once:
            handed: asyncio.Future = asyncio.get_running_loop().create_future()
            heapq.heappush(self._waiting, (self._served.lately(mac), next(self._arrivals),
                                           handed))
            try:
                await handed
            except asyncio.CancelledError:
                if handed.done() and not handed.cancelled():
                    self._hand_on()  # handed the turn as it was cancelled: pass it on
                raise
        else:
            self._holders += 1
            if yield_first:
                try:
                    await asyncio.sleep(0)
                except asyncio.CancelledError:
                    self._hand_on()
                    raise
        try:
            yield
        finally:
            self._hand_on()

    @property
    def waiting(self) -> int:
        return sum(1 for _, _, handed in self._waiting if not handed.done())

    def _hand_on(self) -> None:
        """A turn given back: to the first waiter still waiting (a cancelled one is
        skipped), or free."""
        while self._waiting:
            _, _, handed = heapq.heappop(self._waiting)
            if not handed.done():
                handed.set_result(None)
                return
        self._holders -= 1

"""Turns at this process's CPU for the uploads in progress: one decoded piece of one upload's
body at a time is split, checked, summarised and handed to the writer, and when several
wait, the router served the fewest records lately goes first.

Without turns, every upload in progress gets an equal share of the event loop, so a hundred
MACs flooding at full speed (a Sybil fleet) leave an honest router a hundredth of the process
and its upload takes a hundred times as long. With them, the honest router, which sends
little, waits for at most the piece in progress and then goes before every flooder.
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


class FairTurns:
    def __init__(self, window_seconds: float = WINDOW_SECONDS):
        self._window_seconds = window_seconds
        self._window_started = time.monotonic()
        self._served: dict[str, int] = {}  # mac -> records this window
        self._busy = False
        self._waiting: list[tuple[int, int, asyncio.Future]] = []  # (served, arrival, turn)
        self._arrivals = itertools.count()

    @asynccontextmanager
    async def turn(self, mac: str) -> AsyncIterator[None]:
        """This process's CPU for the block, in the order above."""
        if self._busy:
            handed: asyncio.Future = asyncio.get_running_loop().create_future()
            heapq.heappush(self._waiting, (self._served_lately(mac), next(self._arrivals),
                                           handed))
            try:
                await handed
            except asyncio.CancelledError:
                if handed.done() and not handed.cancelled():
                    self._hand_on()  # handed the turn as it was cancelled: pass it on
                raise
        else:
            self._busy = True
        try:
            yield
        finally:
            self._hand_on()

    def count(self, mac: str, records: int) -> None:
        """The router was served `records` more."""
        self._served_lately(mac)
        self._served[mac] = self._served.get(mac, 0) + records

    @property
    def waiting(self) -> int:
        return sum(1 for _, _, handed in self._waiting if not handed.done())

    def _served_lately(self, mac: str) -> int:
        now = time.monotonic()
        if now - self._window_started > self._window_seconds:
            self._served.clear()
            self._window_started = now
        return self._served.get(mac, 0)

    def _hand_on(self) -> None:
        """The turn to the first waiter still waiting (a cancelled one is skipped)."""
        while self._waiting:
            _, _, handed = heapq.heappop(self._waiting)
            if not handed.done():
                handed.set_result(None)
                return
        self._busy = False

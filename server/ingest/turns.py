"""Fair turns for the uploads in progress, at two places: the ingestion pool's connections
(at most INGEST_DB_POOL_MAX uploads hold one) and the statements running in the database
(at most INGEST_WRITES_AT_ONCE). When more wait, the router served the fewest records lately
gets the next turn handed back, not the next upload in arrival order. A statement's turn
stops counting after WRITE_OVERTIME_SECONDS: one waiting on rows another upload holds (its
own router's, stalled mid-body) would otherwise hold it for as long, and that upload's next
chunk could then wait for the very turn (tests/test_hostile.py).

Without them, a hundred MACs flooding at full speed (a Sybil fleet) fill the pool's queue
and an honest router's upload waits behind every one of them: 45 times its quiet time in
bench/hunt_flood.py, 3.7-4.2 times with both turns on 2 cores, 2.7 with the spare below
(the rest is the CPU and the WAL's flushes, which the flood saturates there). The same order
was tried at the CPU (one decoded piece of one upload at a time): it won little more and
cost 15 % of ingestion with 4 uploads at once, since a piece that awaits nothing must yield
to let others queue; and for a whole upload (bench/README.md): no gain this machine
could tell.

One turn more than `at_once` (`spare`) is kept for a router served under half the records of
the average router served lately: an honest router beside a flood takes it at once rather
than waiting for a flooder's statement to end, as fq_codel serves sparse flows first. A
flooder served a little less than the others does not qualify (they are all near the
average), and a fleet of fresh MACs that does (served nothing before) shares that one turn:
the flood gains one turn at most. Such a fleet also lowers the average: 160 MACs sending a
record each every 10 s beside 10 flooders leave an honest router of 500 records over half of
it, and it then waits at the turns as it did before the spare. At the pool it is a
connection beyond INGEST_DB_POOL_MAX (SPARE_CONNECTIONS), taken only by an upload whose body
is all read: one whose body still arrives (a byte at a time, if its client likes) waits for
the other turns.
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
SPARE_CONNECTIONS = 1  # the ingestion pool's beyond INGEST_DB_POOL_MAX, for the spare turn
WRITE_OVERTIME_SECONDS = 1.0  # a statement's turn stops counting after (INGEST_WRITES_AT_ONCE)
PATIENCE_SECONDS = 5.0  # a waiter this long goes before those served less


class Served:
    """Records each router was served lately (this window)."""

    def __init__(self, window_seconds: float = WINDOW_SECONDS):
        self._window_seconds = window_seconds
        self._window_started = time.monotonic()
        self._records: dict[str, int] = {}
        self._total = 0  # of `_records`

    def count(self, mac: str, records: int) -> None:
        self._records[mac] = self.lately(mac) + records
        self._total += records

    def under_served(self, mac: str) -> bool:
        """Whether the router was served under half the records of the average router
        served lately."""
        lately = self.lately(mac)
        return lately * 2 * len(self._records) < self._total

    def lately(self, mac: str) -> int:
        now = time.monotonic()
        if now - self._window_started > self._window_seconds:
            self._records.clear()
            self._total = 0
            self._window_started = now
        return self._records.get(mac, 0)


class FairTurns:
    """At most `at_once` holders, and with `spare` one more while it is an under-served
    router's; waiters handed a turn least served first, then in arrival order, except that
    one waiting PATIENCE_SECONDS goes first (the longest waiting): a router served more than
    each of a stream of cheap MACs is not kept waiting for ever.
    With `overtime_seconds`, a turn held that long is handed on while its holder goes on: a
    holder stuck (a statement waiting on another upload's locks) stops counting."""

    def __init__(self, served: Served, at_once: int = 1, overtime_seconds: float | None = None,
                 patience_seconds: float = PATIENCE_SECONDS, spare: bool = False):
        self._served = served
        self._at_once = at_once
        self._overtime_seconds = overtime_seconds
        self._patience_seconds = patience_seconds
        self._holders = 0
        self._spare_free = spare
        # (served, arrival, mac or None where the spare is not allowed, turn): the turn's
        # result says whether it is the spare
        self._waiting: list[tuple[int, int, str | None, asyncio.Future]] = []
        self._arrived: collections.deque[tuple[float, asyncio.Future]] = collections.deque()
        self._arrivals = itertools.count()
        self._handed_out_of_order = 0  # by patience or as the spare: entries still waiting

    @asynccontextmanager
    async def turn(self, mac: str, spare_allowed: bool = True) -> AsyncIterator[None]:
        """`spare_allowed`: whether this turn may be the spare (not for an upload whose body
        is still arriving: one sent a byte at a time would hold it)."""
        spare = await self._take(mac, spare_allowed)
        given_back = False

        def give_back_once() -> None:
            nonlocal given_back
            if not given_back:
                given_back = True
                self._give_back(spare)

        overtime = None if self._overtime_seconds is None else \
            asyncio.get_running_loop().call_later(self._overtime_seconds, give_back_once)
        try:
            yield
        finally:
            if overtime is not None:
                overtime.cancel()
            give_back_once()

    async def _take(self, mac: str, spare_allowed: bool) -> bool:
        """A turn taken, at once or when handed: whether it is the spare."""
        if self._holders < self._at_once:
            self._holders += 1
            return False
        if spare_allowed and self._spare_free and self._served.under_served(mac):
            self._spare_free = False
            return True
        handed: asyncio.Future = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (self._served.lately(mac), next(self._arrivals),
                                       mac if spare_allowed else None, handed))
        self._arrived.append((time.monotonic(), handed))
        try:
            return await handed
        except asyncio.CancelledError:
            if handed.done() and not handed.cancelled():
                self._give_back(handed.result())  # handed as it was cancelled: pass it on
            raise

    @property
    def waiting(self) -> int:
        return sum(1 for *_, handed in self._waiting if not handed.done())

    def _give_back(self, spare: bool) -> None:
        if spare:
            self._hand_spare()
        else:
            self._hand_on()

    def _hand_spare(self) -> None:
        """The spare given back: to the first waiter (least served, then in arrival order)
        that may take it and is under-served now, or free."""
        eligible = [entry for entry in self._waiting if not entry[3].done()
                    and entry[2] is not None and self._served.under_served(entry[2])]
        if eligible:
            min(eligible)[3].set_result(True)
            self._handed_out_of_order += 1  # its entry is let go with the patience's
        else:
            self._spare_free = True

    def _hand_on(self) -> None:
        """A turn given back: to the waiter out of patience, else to the first waiter still
        waiting (one cancelled, or handed its turn by the other order, is skipped), or
        free."""
        arrived = self._arrived
        while arrived and arrived[0][1].done():
            arrived.popleft()
        if arrived and time.monotonic() - arrived[0][0] >= self._patience_seconds:
            arrived.popleft()[1].set_result(False)
            self._handed_out_of_order += 1
            if self._handed_out_of_order > len(self._waiting) // 2:  # their entries let go
                self._waiting = [entry for entry in self._waiting if not entry[3].done()]
                heapq.heapify(self._waiting)
                self._handed_out_of_order = 0
            return
        while self._waiting:
            *_, handed = heapq.heappop(self._waiting)
            if not handed.done():
                handed.set_result(False)
                return
        self._holders -= 1

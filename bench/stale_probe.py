"""Stale-304 probe: while a drill runs, checks again and again that the service never
answers 304 for an ETag the database replaced more than GRACE_SECONDS before.

Each cycle reads every router's IDS ETag straight from the database (not through the
service), waits GRACE_SECONDS (the time a payload change's notification may take to reach
every server process's ETag cache), then polls each router whose ETag changed since the
previous read with its previous ETag, on LANES keep-alive connections at once: polls as the
routers send them, which the handler answers from its ETag cache when that
says 304, and connections the kernel spreads over the HTTP workers. A 304 there is stale
when the database still holds another ETag afterwards.
The service documents two windows in which it may answer 304 for a replaced payload: the
moment between a commit and its notification (GRACE_SECONDS covers it) and a cut network
until its heartbeat finds it (server/polling/etag_cache.py); the drill marks its faults and
a cycle that overlaps one gives no verdict.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import aiohttp

from server.db.location import DatabaseLocation
from server.polling.etag_cache import etag_header
from testkit.database import Sql

GRACE_SECONDS = 2.0
PAUSE_SECONDS = 0.5
LANES = 4  # all on one of 2 workers one cycle in 8
FAULT_MARGIN_SECONDS = 1.0  # after a fault's end, for the listeners to listen again


@dataclass
class StaleProbeResult:
    probes: int = 0        # polls with an ETag the database had replaced, verdict given
    stale: int = 0         # of those, answered 304 while the database still held another
    examples: list[str] = field(default_factory=list)


class StaleProbe:
    def __init__(self, url: str, location: DatabaseLocation):
        self._url = url + "/rules/ids"
        self._sql = Sql(location)
        self._stop = asyncio.Event()
        self._fault_since: float | None = None  # monotonic; a fault in progress
        self._fault_ended = float("-inf")
        self.result = StaleProbeResult()

    def fault_started(self) -> None:
        self._fault_since = time.monotonic()

    def fault_ended(self) -> None:
        self._fault_since, self._fault_ended = None, time.monotonic()

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> StaleProbeResult:
        previous: dict[str, str] = {}
        while not self._stop.is_set():
            read_at = time.monotonic()
            current = await self._etags()
            if current is not None:
                replaced = {mac: old for mac, old in previous.items()
                            if current.get(mac) not in (None, old)}
                previous = current
                if replaced:
                    await asyncio.sleep(GRACE_SECONDS)
                    await self._check(replaced, read_at)
            await asyncio.sleep(PAUSE_SECONDS)
        return self.result

    async def _etags(self) -> dict[str, str] | None:
        try:
            rows = await asyncio.to_thread(
                self._sql.rows, "SELECT mac::text, ids_etag FROM router_rules "
                "WHERE ids_etag IS NOT NULL")
        except Exception:  # noqa: BLE001 - the database is away (a fault): no reading
            return None
        return dict(rows)

    async def _check(self, replaced: dict[str, str], read_at: float) -> None:
        connector = aiohttp.TCPConnector(limit=LANES)
        async with aiohttp.ClientSession(connector=connector,
                                         timeout=aiohttp.ClientTimeout(total=30)) as session:
            lanes = await asyncio.gather(*(self._lane(session, replaced)
                                           for _ in range(LANES)))
        answers = [answer for lane in lanes for answer in lane]
        after = await self._etags()
        if after is None or not self._quiet_since(read_at):
            return  # a fault began meanwhile: no verdict on this cycle
        self.result.probes += sum(status in (200, 304) for _, status in answers)
        for mac in (mac for mac, status in answers if status == 304):
            if after.get(mac) != replaced[mac]:  # (not changed back meanwhile)
                self.result.stale += 1
                self.result.examples.append(
                    f"{mac}: 304 for {replaced[mac]} while the database held {after.get(mac)}")

    async def _lane(self, session: aiohttp.ClientSession,
                    replaced: dict[str, str]) -> list[tuple[str, int]]:
        """(router, status) of a poll of each router with its replaced ETag, one after the
        other; a status other than 200 or 304 (refused, unavailable) gets no verdict."""
        return [(mac, await self._poll(session, mac, old)) for mac, old in replaced.items()]

    async def _poll(self, session: aiohttp.ClientSession, mac: str, etag: str) -> int:
        try:
            async with session.get(self._url, headers={
                    "X-ID": mac, "If-None-Match": etag_header(etag)}) as response:
                await response.read()
                return response.status
        except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError):
            return 0

    def _quiet_since(self, moment: float) -> bool:
        """No fault in progress, and none ended within FAULT_MARGIN_SECONDS before `moment`
        (a cycle's database read)."""
        return (self._fault_since is None
                and self._fault_ended + FAULT_MARGIN_SECONDS < moment)

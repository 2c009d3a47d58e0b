"""The current ETag of each payload this process served, kept in memory, so that a router
polling with an unchanged ETag (nearly every poll) is answered 304 without a query.

Kept true by PostgreSQL: a trigger on router_rules (migration 0006) notifies channel
`router_rules` with the router's MAC whenever its payload content changes, whoever wrote it,
and this process LISTENs on a connection of its own and forgets that router. While that
connection is down the cache is neither read nor filled (every poll goes to the database,
as without a cache), and it starts empty again once listening resumes, so no change can be
missed. The one window left is the moment between a commit and the arrival of its
notification, when a poll may still get 304; the router picks the change up on its next poll.
"""

from __future__ import annotations

import asyncio
import logging

import aiopg

from server.background import BackgroundTasks, pause
from server.db.location import DatabaseLocation

log = logging.getLogger("router_backend.etag_cache")

CHANNEL = "router_rules"
MAX_ROUTERS = 1_000_000          # about 150 bytes each; cleared whole when full
RECONNECT_SECONDS = (0.5, 10.0)  # first and longest wait between attempts to listen again


class EtagCache:
    def __init__(self, location: DatabaseLocation, connect_timeout: float):
        self._location = location
        self._timeout = connect_timeout
        self._etags: dict[tuple[str, str], str] = {}
        self._changes = 0  # notifications seen (and listening starts and stops)
        self.listening = False
        self._tasks = BackgroundTasks()

    def __len__(self) -> int:
        return len(self._etags)

    def etag(self, mac: str, kind: str) -> str | None:
        return self._etags.get((mac, kind)) if self.listening else None

    def token(self) -> int:
        """Take before reading a payload; give to remember() after."""
        return self._changes

    def remember(self, mac: str, kind: str, etag: str, token: int) -> None:
        """Keep an ETag read from the database, unless a change was notified since the read
        began (the value read may predate it)."""
        if not self.listening or token != self._changes:
            return
        if len(self._etags) >= MAX_ROUTERS:
            self._etags.clear()
        self._etags[(mac, kind)] = etag

    def forget(self, mac: str) -> None:
        self._changes += 1
        self._etags.pop((mac, "ids"), None)
        self._etags.pop((mac, "firewall"), None)

    def start(self) -> None:
        self._tasks.spawn(self._listen_forever(), "etag-cache-listener")

    async def stop(self) -> None:
        await self._tasks.stop()

    async def _listen_forever(self) -> None:
        delay = RECONNECT_SECONDS[0]
        while True:
            try:
                await self._listen()
            except asyncio.CancelledError:
                self._stop_using()
                raise
            except Exception as error:  # the database went away: no cache until it is back
                if self.listening:
                    log.warning("payload change notifications lost (%s); polls go to the "
                                "database until they resume", error)
                    delay = RECONNECT_SECONDS[0]
                else:
                    delay = min(delay * 2, RECONNECT_SECONDS[1])
                self._stop_using()
            await pause(delay)

    async def _listen(self) -> None:
        """Returns only by an exception (the connection was lost)."""
        async with aiopg.connect(self._location.dsn(), timeout=self._timeout,
                                 enable_hstore=False, enable_json=False,
                                 enable_uuid=False) as conn:
            async with conn.cursor() as cur:
                await cur.execute(f"LISTEN {CHANNEL}")
            self._etags.clear()  # changes made while nobody listened are unknown
            self._changes += 1
            self.listening = True
            log.info("listening for payload changes")
            while True:
                notification = await conn.notifies.get()
                self.forget(notification.payload)

    def _stop_using(self) -> None:
        self.listening = False
        self._changes += 1
        self._etags.clear()

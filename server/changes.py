"""The one change feed: a LISTEN connection of this process's own on every channel something
in memory follows (server/db/channels.py), kept up by a heartbeat and reconnected when lost.

A subscriber follows a channel with two functions: one called with each notification's
payload, one called whenever listening starts or stops (what changed meanwhile is unknown, so
whatever it keeps in memory is dropped). While the connection is down `listening` is False,
and every subscriber serves from the database (the ETag cache answers no 304 from memory, the
shared documents are rebuilt when older than a few seconds). A connection cut without being
closed (the network between us and the database) is found by a heartbeat query after
HEARTBEAT_SECONDS of silence, within the connect timeout.

Subscribers today: the ETag cache (server/polling/etag_cache.py), router keys
(server/routers/keys.py), the routers admitted and their declarations
(server/routers/identity.py, server/generation/declarations.py), the fleet's and the threat
intelligence documents (server/polling/shared_document.py).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from server.background import BackgroundTasks, pause
from server.db.pool import Database
from server.metrics import Metrics

log = logging.getLogger("router_backend.changes")

HEARTBEAT_SECONDS = 5.0          # between checks of the listening connection (a query)
RECONNECT_SECONDS = (0.5, 10.0)  # first and longest wait between attempts to listen again


class ChangeFeed:
    def __init__(self, db: Database, connect_timeout: float, metrics: Metrics):
        self._db = db
        self._timeout = connect_timeout
        self._health = metrics.loop_health("change-feed", log)
        self.listening = False
        self._tasks = BackgroundTasks()
        # channel -> [(on a notification's payload, on a start or stop of listening)]
        self._followers: dict[str, list[tuple[Callable[[str], None], Callable[[], None]]]] = {}

    def follow(self, channel: str, changed: Callable[[str], None],
               reset: Callable[[], None]) -> None:
        """Call `changed` with each payload notified on `channel`, and `reset` whenever
        listening starts or stops. Before `start`."""
        self._followers.setdefault(channel, []).append((changed, reset))

    def start(self) -> None:
        self._tasks.spawn(self._listen_forever(), "change-feed")

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
            except Exception as error:  # the database went away: nothing kept until it is back
                self._db.unreachable = True  # requests wait briefly for a connection, not long
                delay = RECONNECT_SECONDS[0] if self.listening else min(
                    delay * 2, RECONNECT_SECONDS[1])
                self._stop_using()
                self._health.failed(f"change notifications lost ({error}); polls go to the "
                                    "database until they resume")
            await pause(delay)

    async def _listen(self) -> None:
        """Returns only by an exception (the connection was lost). Notifications arriving
        during a heartbeat wait in the driver's backlog for the next read."""
        async with self._db.session() as cur:
            for channel in self._followers:
                await cur.execute(f"LISTEN {channel}")
            self._reset_all()  # changes made while nobody listened are unknown
            self.listening = True
            self._health.succeeded()
            log.info("listening for changes: %s", ", ".join(self._followers))
            while True:
                async for notification in cur.connection.notifies(timeout=HEARTBEAT_SECONDS):
                    for changed, _ in self._followers.get(notification.channel, ()):
                        changed(notification.payload)
                await asyncio.wait_for(cur.execute("SELECT 1"), self._timeout)
                self._health.succeeded()

    def _stop_using(self) -> None:
        self.listening = False
        self._reset_all()

    def _reset_all(self) -> None:
        for followers in self._followers.values():
            for _, reset in followers:
                reset()

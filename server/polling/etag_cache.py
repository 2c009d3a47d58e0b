"""The current ETag of each payload this process served, kept in memory, so that a router
polling with an unchanged ETag (nearly every poll) is answered 304 without a query.

Kept true by PostgreSQL: the statements that write payloads (server/db/rules.py) notify
channel `router_rules` with the router's MAC, in their transaction, whenever its payload
content changes (migration 0021 replaced the trigger of 0006, which Citus cannot keep),
and this process LISTENs on a connection of its own and forgets that router. While that
connection is down the cache is neither read nor filled (every poll goes to the database,
as without a cache), and it starts empty again once listening resumes, so no change can be
missed. The one window left is the moment between a commit and the arrival of its
notification, when a poll may still get 304; the router picks the change up on its next poll.
A connection cut without being closed (the network between us and the database) is found by
a heartbeat query after HEARTBEAT_SECONDS of silence, within the connect timeout; a change
committed by another server in that time is seen once listening resumes.

The same connection carries the other per-router changes a process keeps in memory (`follow`:
router keys rotated or revoked, `router_keys`), so each process holds one LISTEN connection.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from server.background import BackgroundTasks, pause
from server.db.pool import Database
from server.metrics import Metrics

log = logging.getLogger("router_backend.etag_cache")

CHANNEL = "router_rules"
HEARTBEAT_SECONDS = 5.0          # between checks of the listening connection (a query)
MAX_ROUTERS = 1_000_000          # about 150 bytes each; cleared whole when full
RECONNECT_SECONDS = (0.5, 10.0)  # first and longest wait between attempts to listen again


def etag_header(value: str) -> str:
    """The ETag header of a payload. Weak: the same content is served plain or
    gzip-encoded under one validator."""
    return f'W/"{value}"'


def wanted_etags(if_none_match: str | None) -> frozenset[str]:
    """The ETag values an If-None-Match names (weak or strong, quotes removed), `*`
    included; entries that are not quoted ETags are ignored."""
    wanted = set()
    for tag in (if_none_match or "").split(","):
        tag = tag.strip().removeprefix("W/")
        if tag == "*":
            wanted.add(tag)
        elif len(tag) >= 2 and tag[0] == tag[-1] == '"':
            wanted.add(tag[1:-1])
    return frozenset(wanted)


def not_modified(wanted: frozenset[str], current: str) -> bool:
    """Whether a poll naming `wanted` is answered 304 for the payload's `current` ETag: the
    one decision, the handler's."""
    return current in wanted or "*" in wanted


class EtagCache:
    def __init__(self, db: Database, connect_timeout: float, metrics: Metrics):
        self._db = db
        self._timeout = connect_timeout
        self._health = metrics.loop_health("etag-cache", log)
        self._etags: dict[tuple[str, str], str] = {}
        self._changes = 0  # notifications seen (and listening starts and stops)
        self.listening = False
        self._tasks = BackgroundTasks()
        # channel -> (forget one router, forget every router)
        self._followers: dict[str, tuple[Callable[[str], None], Callable[[], None]]] = {}

    def follow(self, channel: str, forget: Callable[[str], None],
               forget_all: Callable[[], None]) -> None:
        """Also listen on `channel`: call `forget` with each notified MAC, and `forget_all`
        whenever listening stops or starts (what changed meanwhile is unknown)."""
        self._followers[channel] = (forget, forget_all)

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
                delay = RECONNECT_SECONDS[0] if self.listening else min(
                    delay * 2, RECONNECT_SECONDS[1])
                self._stop_using()
                self._health.failed(f"payload change notifications lost ({error}); polls "
                                    "go to the database until they resume")
            await pause(delay)

    async def _listen(self) -> None:
        """Returns only by an exception (the connection was lost). A connection whose peer
        vanished without closing it (a network cut) would deliver nothing and raise nothing,
        so every HEARTBEAT_SECONDS a query checks it, within the connect timeout: the cache
        is dropped within both of a cut. Notifications arriving meanwhile wait in the
        driver's backlog for the next read."""
        async with self._db.session() as cur:
            for channel in (CHANNEL, *self._followers):
                await cur.execute(f"LISTEN {channel}")
            self._etags.clear()  # changes made while nobody listened are unknown
            self._forget_followed()
            self._changes += 1
            self.listening = True
            self._health.succeeded()
            log.info("listening for payload changes")
            while True:
                async for notification in cur.connection.notifies(timeout=HEARTBEAT_SECONDS):
                    if notification.channel == CHANNEL:
                        self.forget(notification.payload)
                    else:
                        self._followers[notification.channel][0](notification.payload)
                await asyncio.wait_for(cur.execute("SELECT 1"), self._timeout)
                self._health.succeeded()

    def _stop_using(self) -> None:
        self.listening = False
        self._changes += 1
        self._etags.clear()
        self._forget_followed()

    def _forget_followed(self) -> None:
        for _, forget_all in self._followers.values():
            forget_all()

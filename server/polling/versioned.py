"""A shared document with numbered versions (server/polling/versions.py): each document
this process builds is recorded in the database, and the change from any version kept is
read from there, so any process on any host, after any restart, answers a delta
(`?delta=1`, docs/router-api.md). A process's memory holds its current document and the
deltas to it asked lately (DELTAS_KEPT, the one asked least lately dropped first), not a
history; a delta is computed once for the routers asking it at once (at most
COMPUTED_AT_ONCE different ones at a time), and packed in a thread. Each change is built
at once, so that every process records and serves it soon.

A subclass says, beside what a shared document says, how a document is a set of items
(`_items`) and how a delta is written (`_delta_document`), and reads the database's clock
(`_read_clock`) before it reads its state, so that a process whose state is older than the
latest version recorded never records over it."""

from __future__ import annotations

import asyncio
import logging
import time
from abc import abstractmethod
from datetime import datetime
from typing import Callable

from server.db.pool import Database
from server.polling import versions
from server.polling.shared_document import Served, SharedDocument, served_document

log = logging.getLogger("router_backend.documents")

DELTAS_KEPT = 64        # deltas to the current document kept packed, by the ETag they start at
COMPUTED_AT_ONCE = 4    # deltas not kept computed at once, a document
RETRY_SECONDS = 5.0     # a version not recorded is tried again, at a delta asked, after this


async def read_clock(db: Database) -> datetime:
    """The database's time (clock_timestamp(): not the transaction's start)."""
    (now,) = await db.fetchrow("SELECT clock_timestamp()")
    return now


class VersionedDocument(SharedDocument):
    def __init__(self, db: Database, listening: Callable[[], bool], name: str):
        """`name`: the document's among the versions kept (one per size served)."""
        super().__init__(db, listening)
        self.name = name
        self._document: dict | None = None       # the shared document, as built
        self._made_at: datetime | None = None    # when the state it was built from was read
        self._version: tuple[str, int] | None = None  # an ETag recorded, and its number
        self._recorded_at = 0.0                  # the last try to record (monotonic)
        self._recording: asyncio.Task | None = None  # the recording of the last rebuild
        self._deltas: dict[tuple[str, bool], Served] = {}  # (from ETag, places) -> delta
        self._computing: dict[tuple[str, int, bool], asyncio.Task] = {}  # in flight
        self._computations = asyncio.Semaphore(COMPUTED_AT_ONCE)
        self._eager: asyncio.Task | None = None  # the rebuild a change started

    @abstractmethod
    def _items(self, document: dict) -> set[tuple[str, str]]:
        """The document as a set of (place, item)."""

    @abstractmethod
    def _delta_document(self, since: str, document: dict, added: set, removed: set,
                        serials: tuple[int, int], places: bool) -> dict:
        """What a router holding the version of ETag `since` applies to hold `document`
        (`places`: its removals as places, `?delta=2`)."""

    async def _read_clock(self) -> datetime:
        """The database's time, read by `_load` before it reads the state and kept as
        `_made_at` once the state is read: the version's time."""
        return await read_clock(self._db)

    def changed(self, _payload: str = "") -> None:
        """Rebuilt at once, not at the next request: every process then passes through
        every version, and knows the change from each (the deltas), whichever process a
        router's poll reaches."""
        super().changed()
        if self._eager is None or self._eager.done():
            self._eager = asyncio.get_running_loop().create_task(self._rebuild())

    async def _rebuild(self) -> None:
        try:
            await self.served("")
        except Exception as error:  # the next request tries again
            log.info("the %s document was not rebuilt at once: %s", self.name, error)

    def _built(self, served: Served, document: dict) -> None:
        self._document = document
        self._deltas = {}

    async def _reload(self) -> None:
        """Rebuilt, then recorded beside (polls do not wait on the versions' table; a delta
        asked meanwhile waits for it), each version after the one before, so that none is
        skipped."""
        await super()._reload()
        version = (self._shared, self._document, self._made_at)
        self._recording = asyncio.get_running_loop().create_task(
            self._record_after(self._recording, *version))

    async def _record_after(self, previous: asyncio.Task | None, *version) -> None:
        if previous is not None:
            await asyncio.wait([previous])
        await self._record(*version)

    async def _record(self, shared: Served | None, document: dict | None,
                      made_at: datetime | None) -> None:
        """A version recorded (or found recorded); a failure is logged and tried again at
        the next delta asked."""
        self._recorded_at = time.monotonic()
        if shared is None or document is None or made_at is None:
            return
        try:
            held = await asyncio.to_thread(self._items, document)
            serial = await versions.record(self._db, self.name, shared.etag, held,
                                           shared.entries, made_at)
        except Exception as error:  # the document is served; only its deltas wait
            log.warning("the %s document %s was not recorded as a version: %s",
                        self.name, shared.etag, error)
            return
        if serial is None:  # another process recorded a newer state: read it too
            if self._shared is shared:
                self.changed()
        elif self._shared is shared:
            self._version = (shared.etag, serial)

    async def recorded(self, served: Served) -> int | None:
        """The version number of `served` once its recording is done (tried again when it
        failed RETRY_SECONDS ago)."""
        if self.serial(served) is None:
            if self._recording is not None and not self._recording.done():
                await asyncio.shield(self._recording)
            elif time.monotonic() - self._recorded_at > RETRY_SECONDS:
                await self._record(self._shared, self._document, self._made_at)
        return self.serial(served)

    def serial(self, served: Served) -> int | None:
        """The version number of `served`, when it is the shared document, recorded."""
        version = self._version
        return version[1] if version is not None and served is self._shared \
            and version[0] == served.etag else None

    async def delta(self, mac: str, since: str, places: bool = False
                    ) -> tuple[Served, str] | None:
        """What changed since the shared document of ETag `since` (`places`: its removals
        as places), and the ETag it leads to, for a router without an allowlist of its own;
        None when that document is not a version kept before this one (unknown, another
        document's, pruned, later than what this process serves), or when the delta would be
        no smaller than the whole document (most of it replaced): the whole document then."""
        current = await self.served(mac)
        if mac in self._own or current is not self._shared or since == current.etag:
            return None
        serial = await self.recorded(current)
        document, deltas = self._document, self._deltas
        if serial is None or document is None or current is not self._shared:
            return None
        asked = (since, places)
        if (known := deltas.get(asked)) is not None:
            deltas[asked] = deltas.pop(asked)  # the latest asked: the last dropped
            return None if known is current else (known, current.etag)
        key = (since, serial, places)  # one computation for the routers asking it at once
        if (computing := self._computing.get(key)) is None:
            computing = asyncio.get_running_loop().create_task(
                self._computed(since, document, serial, places))
            self._computing[key] = computing
            computing.add_done_callback(lambda _: self._computing.pop(key, None))
        delta = await asyncio.shield(computing)
        if delta is None:
            return None
        if len(delta.packed) >= len(current.packed):  # most replaced: the whole is smaller
            delta = current
        if deltas is self._deltas and asked not in deltas:
            if len(deltas) >= DELTAS_KEPT:  # the one asked least lately goes
                deltas.pop(next(iter(deltas)))
            deltas[asked] = delta
        return None if delta is current else (delta, current.etag)

    async def _computed(self, since: str, document: dict, serial: int, places: bool
                        ) -> Served | None:
        """The delta, None when the version is not kept. At most COMPUTED_AT_ONCE are
        computed at once: each holds a connection and a thread."""
        async with self._computations:
            found = await versions.changes_since(self._db, self.name, since, serial)
            if found is None:
                return None
            start, added, removed = found
            return await asyncio.to_thread(lambda: served_document(self._delta_document(
                since, document, added, removed, (start, serial), places)))  # (off the loop)

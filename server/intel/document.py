"""The threat intelligence document (GET /rules/intel): the indicators the delivery
statement keeps (server/intel/sql.py DELIVERED, every rail applied there) made into Suricata
datasets, a rules file and block-list entries (engine/intel.py), served as every shared
document is (server/polling/shared_document.py). A feed's new version, a removed feed, an
operator's decision and a held value notify channel `intel_list`; the allowlist notifies
`fleet_list`, which this document follows too. An indicator's expiry is not notified: the
document is rebuilt at least every REBUILD_SECONDS, so an expired value leaves it then.

A router holding an earlier document asks what changed since (`delta`). Each shared document
this process builds is recorded as a numbered version in the database
(server/polling/versions.py); the change from any version kept (KEPT_DAYS) is read from
there, so any process on any host, after any restart, answers it, and a process's memory
holds its current document and the deltas to it asked lately (DELTAS_KEPT), not a history.
A delta is packed once per earlier ETag asked, in a thread. Each change is built at once, so
that every process records and serves it soon."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timedelta
from typing import Callable

from engine.firewall import Exemptions
from engine.fleet import times_written
from engine.intel import delta_document, intel_document, items
from server.intel import sql as intel_db
from server.intel.capacity import Capacity, capacity
from server.db.pool import Database, DatabaseUnavailable
from server.polling import versions
from server.polling.shared_document import Served, SharedDocument, served_document

log = logging.getLogger("router_backend.intel")

REBUILD_SECONDS = 3600.0
DELTAS_KEPT = 64        # deltas to the current document kept packed, by the ETag they start at
RETRY_SECONDS = 5.0     # a version not recorded is tried again, at a delta asked, after this


class IntelList(SharedDocument):
    def __init__(self, db: Database, listening: Callable[[], bool], exempt: list[str],
                 capacity: Capacity, trusted_after: timedelta, keyed: bool):
        """`exempt`: the service's own networks, never delivered; `capacity`: the size of
        the document and whether it holds JA4 fingerprints (server/intel/capacity.py);
        `trusted_after`: the age (FLEET_MIN_ROUTER_AGE_HOURS) past which a keyed router's
        poll address keeps a value out; `keyed`: ROUTER_AUTH=key (in mac mode no poll
        address does)."""
        super().__init__(db, listening)
        self._exempt = exempt
        self._capacity = capacity
        self._trusted_after = trusted_after
        self._keyed = keyed
        self._document: dict | None = None       # the shared document, as built
        self._made_at: datetime | None = None    # when the state it was built from was read
        self._version: tuple[str, int] | None = None  # an ETag recorded, and its number
        self._recorded_at = 0.0                  # the last try to record (monotonic)
        self._recording: asyncio.Task | None = None  # the recording of the last rebuild
        self._deltas: dict[str, Served] = {}     # from ETag -> delta to the current
        self._eager: asyncio.Task | None = None  # the rebuild a change started

    def _outdated(self) -> bool:
        return super()._outdated() or time.monotonic() - self._loaded_at > REBUILD_SECONDS

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
            log.info("the intel document was not rebuilt at once: %s", error)

    async def _load(self) -> list[dict]:
        """What the delivery statement keeps. Should it fail for anything but the database
        being away (a value it cannot take, whatever a feed slipped past the checks), the
        entries of the last good load are kept and the failure logged: a feed must never
        stop routers from polling (GET /rules/last_updated names this document)."""
        try:
            (made_at,) = await self._db.fetchrow("SELECT clock_timestamp()")
            rows = await intel_db.delivered(self._db, self._exempt, self._capacity.entries,
                                            self._trusted_after, self._keyed,
                                            () if self._capacity.ja4 else ("ja4",))
        except DatabaseUnavailable:
            raise
        except Exception:
            log.exception("the threat intelligence document could not be read; the last one "
                          "is served")
            return self._state or []
        self._made_at = made_at
        return [times_written({"kind": kind, "value": value, "expires_at": expires_at})
                for kind, value, expires_at in rows]

    def _build(self, entries: list[dict], exempt: list[str]) -> dict:
        return intel_document(entries, Exemptions.of(exempt, []))

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
            held = await asyncio.to_thread(items, document)
            serial = await versions.record(self._db, self._capacity.name, shared.etag, held,
                                           shared.entries, made_at)
        except Exception as error:  # the document is served; only its deltas wait
            log.warning("the intel document %s was not recorded as a version: %s",
                        shared.etag, error)
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

    async def delta(self, mac: str, since: str) -> tuple[Served, str] | None:
        """What changed since the shared document of ETag `since`, and the ETag it leads
        to, for a router without an allowlist of its own; None when that document is not a
        version kept before this one (unknown, another document's, pruned, later than what
        this process serves): the whole document then."""
        current = await self.served(mac)
        if mac in self._own or current is not self._shared or since == current.etag:
            return None
        serial = await self.recorded(current)
        document, deltas = self._document, self._deltas
        if serial is None or document is None or current is not self._shared:
            return None
        if (known := deltas.get(since)) is not None:
            return known, current.etag
        start = await versions.since_serial(self._db, self._capacity.name, since, serial)
        if start is None or start >= serial:
            return None
        added, removed = await versions.changes(self._db, self._capacity.name, start, serial)
        delta = await asyncio.to_thread(served_document, delta_document(
            since, document, added, removed, (start, serial)))
        if len(deltas) < DELTAS_KEPT and deltas is self._deltas:
            deltas[since] = delta
        return delta, current.etag


class IntelLists:
    """The threat intelligence documents, one for each capacity routers name
    (server/intel/capacity.py), each made when a router first asks for it: at most
    len(SIZES) × 2, whatever the fleet."""

    def __init__(self, make: Callable[[Capacity], IntelList], max_entries: int):
        self._make = make
        self._max_entries = max_entries
        self._lists: dict[Capacity, IntelList] = {}

    def for_router(self, header: str | None) -> IntelList:
        """The document for a router naming `header` (Router-Capacity, or None);
        CapacityInvalid when the header is malformed."""
        wanted = capacity(header, self._max_entries)
        if (found := self._lists.get(wanted)) is None:
            found = self._lists[wanted] = self._make(wanted)
        return found

    def changed(self, payload: str = "") -> None:
        for document in list(self._lists.values()):
            document.changed(payload)

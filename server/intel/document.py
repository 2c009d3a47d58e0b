"""The threat intelligence document (GET /rules/intel): the indicators the delivery
statement keeps (server/intel/sql.py DELIVERED, every rail applied there) made into Suricata
datasets, a rules file and block-list entries (engine/intel.py), served as every shared
document is (server/polling/shared_document.py). A feed's new version, a removed feed, an
operator's decision and a held value notify channel `intel_list`; the allowlist notifies
`fleet_list`, which this document follows too. An indicator's expiry is not notified: the
document is rebuilt at least every REBUILD_SECONDS, so an expired value leaves it then.

A router holding an earlier document asks what changed since (`delta`): each version is
numbered and kept in the database (server/polling/versioned.py)."""

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
from server.polling.sized import SizedDocuments
from server.polling.versioned import VersionedDocument, read_clock

log = logging.getLogger("router_backend.intel")

REBUILD_SECONDS = 3600.0


class DeliveredRows:
    """The delivery statement read once for every document of a JA4 choice: a smaller
    document is the first entries of the larger (its order is total), so a change costs a
    process two reads (with JA4 and without), not one for each size it serves. A read is
    shared by the documents asking for one begun after a time they name (their last change;
    for a rebuild of time, SHARE_SECONDS ago); a failed one is not."""

    SHARE_SECONDS = 2.0

    def __init__(self, db: Database, exempt: list[str], trusted_after: timedelta,
                 keyed: bool):
        """`exempt`: the service's own networks, never delivered; `trusted_after`: the age
        (FLEET_MIN_ROUTER_AGE_HOURS) past which a keyed router's poll address keeps a value
        out; `keyed`: ROUTER_AUTH=key (in mac mode no poll address does)."""
        self._db = db
        self._exempt = exempt
        self._trusted_after = trusted_after
        self._keyed = keyed
        self._largest: dict[bool, int] = {}  # ja4 -> the most entries a document holds
        self._reads: dict[bool, tuple[float, int, asyncio.Task]] = {}  # ja4 -> its last

    def expect(self, largest: dict[bool, int]) -> None:
        """`largest`: the most entries a document of each JA4 choice holds, which the next
        read of that choice reads."""
        self._largest = largest

    async def rows(self, entries: int, ja4: bool, fresh_after: float
                   ) -> tuple[datetime, list[tuple]]:
        """The database's time before the read, and the first `entries` rows delivered, of
        a read begun after `fresh_after` (monotonic)."""
        now = time.monotonic()
        held = self._reads.get(ja4)
        if held is None or held[1] < entries or held[0] < fresh_after \
                or (held[2].done() and (held[2].cancelled() or held[2].exception())):
            limit = max(entries, self._largest.get(ja4, 0))
            held = (now, limit, asyncio.get_running_loop().create_task(self._read(limit, ja4)))
            self._reads[ja4] = held
        made_at, rows = await asyncio.shield(held[2])
        return made_at, rows[:entries]

    async def _read(self, entries: int, ja4: bool) -> tuple[datetime, list[tuple]]:
        made_at = await read_clock(self._db)
        rows = await intel_db.delivered(self._db, self._exempt, entries, self._trusted_after,
                                        self._keyed, () if ja4 else ("ja4",))
        return made_at, rows


class IntelList(VersionedDocument):
    def __init__(self, db: Database, listening: Callable[[], bool], delivered: DeliveredRows,
                 capacity: Capacity):
        """`delivered`: what the delivery statement keeps, read once for the documents of
        a change; `capacity`: the size of the document and whether it holds JA4
        fingerprints (server/intel/capacity.py)."""
        super().__init__(db, listening, capacity.name)
        self._delivered = delivered
        self._capacity = capacity
        self._changed_at = time.monotonic()  # the last change notified, or its making: a
        # document made after a change shares no read begun before it

    def changed(self, payload: str = "") -> None:
        self._changed_at = time.monotonic()
        super().changed(payload)

    def _outdated(self) -> bool:
        return super()._outdated() or time.monotonic() - self._loaded_at > REBUILD_SECONDS

    async def _load(self) -> list[dict]:
        """What the delivery statement keeps. Should it fail for anything but the database
        being away (a value it cannot take, whatever a feed slipped past the checks), the
        entries of the last good load are kept and the failure logged: a feed must never
        stop routers from polling (GET /rules/last_updated names this document)."""
        try:
            fresh_after = self._changed_at if self._changes != self._seen \
                else time.monotonic() - DeliveredRows.SHARE_SECONDS
            made_at, rows = await self._delivered.rows(
                self._capacity.entries, self._capacity.ja4, fresh_after)
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
        return intel_document(entries, Exemptions.of(exempt, []), self._capacity.block)

    def _items(self, document: dict) -> set[tuple[str, str]]:
        return items(document)

    def _delta_document(self, since: str, document: dict, added: set, removed: set,
                        serials: tuple[int, int], places: bool) -> dict:
        return delta_document(since, document, added, removed, serials, places)


class IntelLists(SizedDocuments[Capacity, IntelList]):
    """The threat intelligence documents, one for each capacity routers name
    (server/intel/capacity.py): at most one per pair of sizes (entries, block entries) with
    and without JA4, whatever the fleet."""

    def __init__(self, make: Callable[[Capacity], IntelList], max_entries: int,
                 delivered: DeliveredRows):
        """`delivered`: the reads the documents `make` makes share."""
        super().__init__(make)
        self._max_entries = max_entries
        self._delivered = delivered

    def _size(self, header: str | None) -> Capacity:
        return capacity(header, self._max_entries)

    def changed(self, payload: str = "") -> None:
        self._drop_idle()
        largest: dict[bool, int] = {}
        for held in self.sizes():
            largest[held.ja4] = max(largest.get(held.ja4, 0), held.entries)
        self._delivered.expect(largest)
        super().changed(payload)

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

import logging
import time
from datetime import timedelta
from typing import Callable

from engine.firewall import Exemptions
from engine.fleet import times_written
from engine.intel import delta_document, intel_document, items
from server.intel import sql as intel_db
from server.intel.capacity import Capacity, capacity
from server.db.pool import Database, DatabaseUnavailable
from server.polling.sized import SizedDocuments
from server.polling.versioned import VersionedDocument

log = logging.getLogger("router_backend.intel")

REBUILD_SECONDS = 3600.0


class IntelList(VersionedDocument):
    def __init__(self, db: Database, listening: Callable[[], bool], exempt: list[str],
                 capacity: Capacity, trusted_after: timedelta, keyed: bool):
        """`exempt`: the service's own networks, never delivered; `capacity`: the size of
        the document and whether it holds JA4 fingerprints (server/intel/capacity.py);
        `trusted_after`: the age (FLEET_MIN_ROUTER_AGE_HOURS) past which a keyed router's
        poll address keeps a value out; `keyed`: ROUTER_AUTH=key (in mac mode no poll
        address does)."""
        super().__init__(db, listening, capacity.name)
        self._exempt = exempt
        self._capacity = capacity
        self._trusted_after = trusted_after
        self._keyed = keyed

    def _outdated(self) -> bool:
        return super()._outdated() or time.monotonic() - self._loaded_at > REBUILD_SECONDS

    async def _load(self) -> list[dict]:
        """What the delivery statement keeps. Should it fail for anything but the database
        being away (a value it cannot take, whatever a feed slipped past the checks), the
        entries of the last good load are kept and the failure logged: a feed must never
        stop routers from polling (GET /rules/last_updated names this document)."""
        try:
            made_at = await self._read_clock()
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
        return intel_document(entries, Exemptions.of(exempt, []), self._capacity.block)

    def _items(self, document: dict) -> set[tuple[str, str]]:
        return items(document)

    def _delta_document(self, since: str, document: dict, added: set, removed: set,
                        serials: tuple[int, int]) -> dict:
        return delta_document(since, document, added, removed, serials)


class IntelLists(SizedDocuments[Capacity, IntelList]):
    """The threat intelligence documents, one for each capacity routers name
    (server/intel/capacity.py): at most one per pair of sizes (entries, block entries) with
    and without JA4, whatever the fleet."""

    def __init__(self, make: Callable[[Capacity], IntelList], max_entries: int):
        super().__init__(make)
        self._max_entries = max_entries

    def _size(self, header: str | None) -> Capacity:
        return capacity(header, self._max_entries)

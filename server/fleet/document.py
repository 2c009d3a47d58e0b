"""The fleet's shared document (GET /rules/fleet): built from the `fleet_attackers` table
and the fleet's allowlist (engine/fleet.py), served as every shared document is
(server/polling/shared_document.py). The fleet job, and every change of the allowlist,
notify channel `fleet_list` in their transaction.

A router that names `sets` in its Router-Capacity (server/polling/capacity.py) gets the
largest size of SIZES that one of its sets holds: the list's first entries in the stored
order (most networks, then routers, then the most recently seen day, then the address: an
hour reported does not reorder it). One that names no `sets` gets the whole list (at most
FLEET_MAX_ENTRIES, 10,000 by default: a sixth of what an ipset holds by default). Routers
of like capacity share one document.

Each size's versions are numbered and kept in the database (server/polling/versioned.py),
so a router asks what changed since the list it holds (`?delta=1`), from any process, after
any restart."""

from __future__ import annotations

import asyncio
from typing import Callable

from engine.firewall import Exemptions
from engine.fleet import fleet_delta, fleet_document, fleet_items, times_written
from server.fleet import sql as fleet_db
from server.db.pool import Database
from server.metrics import Metrics
from server.polling.capacity import declared, largest_fitting
from server.polling.shared_document import Served
from server.polling.sized import SizedDocuments
from server.polling.versioned import VersionedDocument

__all__ = ["FleetList", "FleetLists", "Served"]


class FleetList(VersionedDocument):
    def __init__(self, db: Database, listening: Callable[[], bool], metrics: Metrics,
                 enabled: bool = True, max_entries: int | None = None):
        """`enabled` False (FLEET_ENABLED=false): the document is empty, whatever the tables
        hold from before. `max_entries`: a smaller router's list (None: the whole list)."""
        name = "fleet" if max_entries is None else f"fleet-{max_entries}"
        super().__init__(db, listening, name)
        self._enabled = enabled
        self._metrics = metrics
        self._max_entries = max_entries

    def _allowlists_apply(self) -> bool:
        return self._enabled

    async def _load(self) -> list[dict]:
        made_at = await self._read_clock()
        stored = await fleet_db.attackers(self._db) if self._enabled else []
        self._made_at = made_at
        # The entries' times written as the document carries them, in a thread.
        return await asyncio.to_thread(lambda: [times_written(entry) for entry in stored])

    def _build(self, attackers: list[dict], exempt: list[str]) -> dict:
        return fleet_document(attackers, Exemptions.of(exempt, []), self._max_entries)

    def _built(self, served: Served, document: dict) -> None:
        super()._built(served, document)
        if self._max_entries is None:  # the whole list
            self._metrics.fleet_entries.labels("served").set(served.entries)

    def _items(self, document: dict) -> set[tuple[str, str]]:
        return fleet_items(document)

    def _delta_document(self, since: str, document: dict, added: set, removed: set,
                        serials: tuple[int, int], places: bool) -> dict:
        return fleet_delta(since, document, added, removed, serials, places)


class FleetLists(SizedDocuments[int | None, FleetList]):
    """The fleet's list in each size routers declare: at most len(SIZES) + 1, whatever the
    fleet; None the whole list."""

    def __init__(self, make: Callable[[int | None], FleetList], max_entries: int):
        super().__init__(make)
        self._max_entries = max_entries
        self.whole = self.sized(None)

    def _size(self, header: str | None) -> int | None:
        sets = declared(header).sets
        if sets is None or sets >= self._max_entries:
            return None
        return largest_fitting(sets, self._max_entries)

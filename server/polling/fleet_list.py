"""The fleet's shared document (GET /rules/fleet) as this process serves it: built from the
`fleet_attackers` table and the fleet's allowlist (engine/fleet.py), packed once, kept in
memory, and served to every router with one ETag, so a poll that names it is answered 304
without a query and a change of the list costs one build per process, whatever the fleet's
size. A router with allowlist entries of its own gets the document without them (built
for it once per change).

Kept true like the ETag cache (server/polling/etag_cache.py), on its connection: the fleet
job, and every change of the allowlist, notify channel `fleet_list` in their transaction,
and the next request after a notification rebuilds the document. While notifications do not
arrive (the listening connection is down) the document is rebuilt when older than
UNHEARD_RELOAD_SECONDS.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Callable

from engine.firewall import Exemptions
from engine.fleet import fleet_document, times_written
from engine.payloads import pack
from server.db import fleet as fleet_db
from server.db.pool import Database
from server.metrics import Metrics
from server.polling.etag_cache import etag_header

UNHEARD_RELOAD_SECONDS = 10.0


@dataclass(frozen=True)
class Served:
    etag: str
    packed: bytes      # gzip of the canonical JSON
    entries: int

    @property
    def header(self) -> str:
        return etag_header(self.etag)


def _served(document: dict) -> Served:
    packed, etag = pack(document)
    return Served(etag, packed, document["entry_count"])


class FleetList:
    def __init__(self, db: Database, listening: Callable[[], bool], metrics: Metrics,
                 enabled: bool = True):
        """`enabled` False (FLEET_ENABLED=false): the document is empty, whatever the tables
        hold from before."""
        self._db = db
        self._enabled = enabled
        self._listening = listening
        self._metrics = metrics
        self._shared: Served | None = None
        self._attackers: list[dict] = []
        self._fleet_allowlist: list[str] = []
        self._own: dict[str, list[str]] = {}     # mac -> its own allowlist networks
        self._variants: dict[str, Served] = {}   # mac -> its document, built on first ask
        self._changes = 0
        self._seen = -1                          # the value of _changes at the last build
        self._loaded_at = 0.0
        self._lock = asyncio.Lock()

    def changed(self, _payload: str = "") -> None:
        """A notification (or listening started or stopped): rebuild at the next request."""
        self._changes += 1

    async def served(self, mac: str) -> Served:
        """The document for this router: the shared one, unless it has its own allowlist."""
        if self._outdated():
            async with self._lock:
                if self._outdated():
                    await self._load()
        if mac not in self._own:
            return self._shared
        variants = self._variants  # a rebuild meanwhile replaces it: this one is not kept
        if (variant := variants.get(mac)) is None:
            exemptions = Exemptions.of(self._fleet_allowlist + self._own[mac], [])
            variant = await asyncio.to_thread(_served, fleet_document(self._attackers,
                                                                      exemptions))
            variants[mac] = variant
        return variant

    def _outdated(self) -> bool:
        return (self._shared is None or self._changes != self._seen
                or (not self._listening()
                    and time.monotonic() - self._loaded_at > UNHEARD_RELOAD_SECONDS))

    async def _load(self) -> None:
        changes = self._changes
        stored, fleet_allowlist, own = [], [], {}
        if self._enabled:
            stored = await fleet_db.attackers(self._db)
            fleet_allowlist = await fleet_db.fleet_allowlist(self._db)
            own = await fleet_db.own_allowlists(self._db)
        # The entries' times written as the document carries them, then the document packed
        # (gzip lets go of the GIL), each in a thread: 10,000 entries take tens of ms each.
        attackers = await asyncio.to_thread(lambda: [times_written(entry) for entry in stored])
        self._shared = await asyncio.to_thread(
            _served, fleet_document(attackers, Exemptions.of(fleet_allowlist, [])))
        self._attackers, self._fleet_allowlist, self._own = attackers, fleet_allowlist, own
        self._variants = {}
        self._seen, self._loaded_at = changes, time.monotonic()
        self._metrics.fleet_entries.labels("served").set(self._shared.entries)

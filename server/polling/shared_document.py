"""A document every router gets the same (the fleet's block list, the threat intelligence),
as this process serves it: built from the database, packed once, kept in memory, and served
to every router with one ETag, so a poll that names it is answered 304 without a query and a
change costs one build per process, whatever the fleet's size. A router with allowlist
entries of its own gets the document without them (built for it once per change).

Kept true like the ETag cache (server/polling/etag_cache.py), on its connection: whatever
changes the document notifies a channel in its transaction, and the next request after a
notification rebuilds it. While notifications do not arrive (the listening connection is
down) the document is rebuilt when older than UNHEARD_RELOAD_SECONDS.

A subclass says what the document is: `_load` reads its state from the database, `_build`
makes the document from it and the networks a router's copy leaves out.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable

from engine.payloads import pack
from server.tuning import allowlist_sql
from server.db.pool import Database
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


def served_document(document: dict) -> Served:
    packed, etag = pack(document)
    return Served(etag, packed, document["entry_count"])


class SharedDocument(ABC):
    def __init__(self, db: Database, listening: Callable[[], bool]):
        self._db = db
        self._listening = listening
        self._shared: Served | None = None
        self._state: Any = None
        self._fleet_allowlist: list[str] = []
        self._own: dict[str, list[str]] = {}     # mac -> its own allowlist networks
        self._variants: dict[str, Served] = {}   # mac -> its document, built on first ask
        self._changes = 0
        self._seen = -1                          # the value of _changes at the last build
        self._loaded_at = 0.0
        self._lock = asyncio.Lock()

    @abstractmethod
    async def _load(self) -> Any:
        """The document's state, read from the database."""

    @abstractmethod
    def _build(self, state: Any, exempt: list[str]) -> dict:
        """The document from the state, less the networks `exempt`."""

    def _built(self, served: Served, document: dict) -> None:
        """Called with each new shared document (metrics, history)."""

    def _allowlists_apply(self) -> bool:
        return True

    def changed(self, _payload: str = "") -> None:
        """A notification (or listening started or stopped): rebuild at the next request."""
        self._changes += 1

    async def served(self, mac: str) -> Served:
        """The document for this router: the shared one, unless it has its own allowlist."""
        if self._outdated():
            async with self._lock:
                if self._outdated():
                    await self._reload()
        if mac not in self._own:
            return self._shared
        variants = self._variants  # a rebuild meanwhile replaces it: this one is not kept
        if (variant := variants.get(mac)) is None:
            exempt = self._fleet_allowlist + self._own[mac]
            variant = await asyncio.to_thread(
                lambda: served_document(self._build(self._state, exempt)))
            variants[mac] = variant
        return variant

    def _outdated(self) -> bool:
        return (self._shared is None or self._changes != self._seen
                or (not self._listening()
                    and time.monotonic() - self._loaded_at > UNHEARD_RELOAD_SECONDS))

    async def _reload(self) -> None:
        changes = self._changes
        state = await self._load()
        fleet_allowlist, own = [], {}
        if self._allowlists_apply():
            fleet_allowlist = await allowlist_sql.fleet_allowlist(self._db)
            own = await allowlist_sql.own_allowlists(self._db)
        # Built and packed in a thread (gzip lets go of the GIL): 10,000 entries take tens of
        # ms, 100,000 a few hundred.
        document = await asyncio.to_thread(self._build, state, fleet_allowlist)
        shared = await asyncio.to_thread(served_document, document)
        self._shared, self._state = shared, state
        self._fleet_allowlist, self._own = fleet_allowlist, own
        self._variants = {}
        self._seen, self._loaded_at = changes, time.monotonic()
        self._built(shared, document)

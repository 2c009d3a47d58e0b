"""The threat intelligence document (GET /rules/intel): the indicators the delivery
statement keeps (server/intel/sql.py DELIVERED, every rail applied there) made into Suricata
datasets, a rules file and block-list entries (engine/intel.py), served as every shared
document is (server/polling/shared_document.py). A feed's new version, a removed feed, an
operator's decision and a held value notify channel `intel_list`; the allowlist notifies
`fleet_list`, which this document follows too. An indicator's expiry is not notified: the
document is rebuilt at least every REBUILD_SECONDS, so an expired value leaves it then.

A router holding an earlier document asks what changed since (`delta`): this process keeps
the changes between its last HISTORY shared documents, and answers the composed change
(engine/intel.py delta_document), packed once per earlier ETag asked. Each change is built
at once, so every HTTP worker knows every version since it started."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from datetime import timedelta
from typing import Callable

from engine.firewall import Exemptions
from engine.fleet import times_written
from engine.intel import changes, composed, delta_document, intel_document
from server.intel import sql as intel_db
from server.db.pool import Database, DatabaseUnavailable
from server.polling.shared_document import Served, SharedDocument, served_document

log = logging.getLogger("router_backend.intel")

REBUILD_SECONDS = 3600.0
HISTORY = 48  # changes of the shared document a delta may span (two days of hourly fetches)


class IntelList(SharedDocument):
    def __init__(self, db: Database, listening: Callable[[], bool], exempt: list[str],
                 max_entries: int, trusted_after: timedelta, keyed: bool):
        """`exempt`: the service's own networks, never delivered; `trusted_after`: the age
        (FLEET_MIN_ROUTER_AGE_HOURS) past which a keyed router's poll address keeps a value
        out; `keyed`: ROUTER_AUTH=key (in mac mode no poll address does)."""
        super().__init__(db, listening)
        self._exempt = exempt
        self._max_entries = max_entries
        self._trusted_after = trusted_after
        self._keyed = keyed
        self._previous: tuple[str, dict] | None = None  # the shared document, its ETag
        self._history: deque = deque(maxlen=HISTORY)    # (from ETag, to ETag, changes)
        self._deltas: dict[str, Served] = {}            # from ETag -> delta to the current
        self._eager: asyncio.Task | None = None         # the rebuild a change started

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
            rows = await intel_db.delivered(self._db, self._exempt, self._max_entries,
                                            self._trusted_after, self._keyed)
        except DatabaseUnavailable:
            raise
        except Exception:
            log.exception("the threat intelligence document could not be read; the last one "
                          "is served")
            return self._state or []
        return [times_written({"kind": kind, "value": value, "expires_at": expires_at})
                for kind, value, expires_at in rows]

    def _build(self, entries: list[dict], exempt: list[str]) -> dict:
        return intel_document(entries, Exemptions.of(exempt, []))

    def _built(self, served: Served, document: dict) -> None:
        """The change from the previous shared document kept (HISTORY of them)."""
        if self._previous is not None and self._previous[0] != served.etag:
            self._history.append((self._previous[0], served.etag,
                                  changes(self._previous[1], document)))
        self._previous = (served.etag, document)
        self._deltas = {}

    async def delta(self, mac: str, since: str) -> tuple[Served, str] | None:
        """What changed since the shared document of ETag `since`, and the ETag it leads
        to, for a router without an allowlist of its own; None when this process does not
        know that document (it started later, or it is older than HISTORY changes): the
        whole document then."""
        current = await self.served(mac)
        if mac in self._own or current is not self._shared or since == current.etag:
            return None
        deltas = self._deltas  # a rebuild meanwhile replaces it: this one is not kept
        if (known := deltas.get(since)) is not None:
            return known, current.etag
        steps = list(self._history)
        start = next((n for n, (before, _, _) in enumerate(steps) if before == since), None)
        if start is None or steps[-1][1] != current.etag or self._previous[0] != current.etag:
            return None
        added, removed = composed([change for _, _, change in steps[start:]])
        delta = await asyncio.to_thread(
            served_document, delta_document(since, self._previous[1], added, removed))
        if len(deltas) < HISTORY:
            deltas[since] = delta
        return delta, current.etag

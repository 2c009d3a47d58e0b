"""The threat intelligence document (GET /rules/intel): the indicators the delivery
statement keeps (server/db/intel.py DELIVERED, every rail applied there) made into Suricata
datasets, a rules file and block-list entries (engine/intel.py), served as every shared
document is (server/polling/shared_document.py). A feed's new version, a removed feed, an
operator's decision and a held value notify channel `intel_list`; the allowlist notifies
`fleet_list`, which this document follows too. An indicator's expiry is not notified: the
document is rebuilt at least every REBUILD_SECONDS, so an expired value leaves it then."""

from __future__ import annotations

import time
from typing import Callable

from engine.firewall import Exemptions
from engine.fleet import times_written
from engine.intel import intel_document
from server.db import intel as intel_db
from server.db.pool import Database
from server.polling.shared_document import SharedDocument

REBUILD_SECONDS = 3600.0


class IntelList(SharedDocument):
    def __init__(self, db: Database, listening: Callable[[], bool], exempt: list[str],
                 max_entries: int):
        """`exempt`: the service's own networks, never delivered."""
        super().__init__(db, listening)
        self._exempt = exempt
        self._max_entries = max_entries

    def _outdated(self) -> bool:
        return super()._outdated() or time.monotonic() - self._loaded_at > REBUILD_SECONDS

    async def _load(self) -> list[dict]:
        rows = await intel_db.delivered(self._db, self._exempt, self._max_entries)
        return [times_written({"kind": kind, "value": value, "expires_at": expires_at})
                for kind, value, expires_at in rows]

    def _build(self, entries: list[dict], exempt: list[str]) -> dict:
        return intel_document(entries, Exemptions.of(exempt, []))

"""The fleet's shared document (GET /rules/fleet): built from the `fleet_attackers` table
and the fleet's allowlist (engine/fleet.py), served as every shared document is
(server/polling/shared_document.py). The fleet job, and every change of the allowlist,
notify channel `fleet_list` in their transaction."""

from __future__ import annotations

import asyncio
from typing import Callable

from engine.firewall import Exemptions
from engine.fleet import fleet_document, times_written
from server.fleet import sql as fleet_db
from server.db.pool import Database
from server.metrics import Metrics
from server.polling.shared_document import Served, SharedDocument

__all__ = ["FleetList", "Served"]


class FleetList(SharedDocument):
    def __init__(self, db: Database, listening: Callable[[], bool], metrics: Metrics,
                 enabled: bool = True):
        """`enabled` False (FLEET_ENABLED=false): the document is empty, whatever the tables
        hold from before."""
        super().__init__(db, listening)
        self._enabled = enabled
        self._metrics = metrics

    def _allowlists_apply(self) -> bool:
        return self._enabled

    async def _load(self) -> list[dict]:
        stored = await fleet_db.attackers(self._db) if self._enabled else []
        # The entries' times written as the document carries them, in a thread.
        return await asyncio.to_thread(lambda: [times_written(entry) for entry in stored])

    def _build(self, attackers: list[dict], exempt: list[str]) -> dict:
        return fleet_document(attackers, Exemptions.of(exempt, []))

    def _built(self, served: Served, document: dict) -> None:
        self._metrics.fleet_entries.labels("served").set(served.entries)

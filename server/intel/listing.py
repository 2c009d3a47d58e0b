"""Sightings as people read them, one shape for the command (`intel sightings --json`) and
the console's pages: the indicator written as it is looked up (a domain's labels in order)."""

from __future__ import annotations

from server.intel import sql as intel_db
from server.db.pool import Database
from engine.intel import shown


async def sightings(db: Database, mac: str | None = None, limit: int = 100_000) -> list[dict]:
    return [{"indicator": shown(kind, value), "kind": kind, "source": source, "mac": mac_,
             "first_seen": first, "last_seen": last, "days": days, "records": records,
             "found_at": found, "told_at": told, "owned": owned, "closed": closed}
            for kind, value, source, mac_, first, last, days, records, found, told, owned, closed
            in await intel_db.sightings(db, mac, limit)]

"""Router registrations (subscriptions)."""

from __future__ import annotations

import aiopg
import sqlalchemy as sa

from server.db.pool import Database, execute
from server.db.schema import routers


# One statement: a new router is registered and queued for its first generation together.
_REGISTER = (
    "WITH registered AS (INSERT INTO routers (mac, registered_by) VALUES (%(mac)s, %(by)s) "
    "ON CONFLICT (mac) DO NOTHING RETURNING mac) "
    "INSERT INTO generation_queue (mac) SELECT mac FROM registered ON CONFLICT DO NOTHING")


SUBSCRIPTIONS = (
    "SELECT r.mac::text, r.registered_at, r.registered_by, r.note, last.activated_at "
    "FROM routers r LEFT JOIN LATERAL (SELECT activated_at FROM activations a "
    "WHERE a.mac = r.mac ORDER BY a.activated_at DESC LIMIT 1) last ON true ORDER BY r.mac")


_MAKE_DUE = ("UPDATE generation_queue SET next_due_at = now() "
             "WHERE (%(mac)s::macaddr IS NULL OR mac = %(mac)s) AND next_due_at > now()")


async def make_due(cur: aiopg.Cursor, mac: str | None) -> int:
    """Make one router (or, with None, every router) due for generation now, inside the
    caller's transaction; how many were not due already."""
    await execute(cur, _MAKE_DUE, {"mac": mac})
    return cur.rowcount


async def register(db: Database, mac: str, registered_by: str = "auto") -> bool:
    """Register `mac` and queue it for generation; return True when it was new."""
    return await db.execute(_REGISTER, {"mac": mac, "by": registered_by}) == 1


async def is_registered(db: Database, mac: str) -> bool:
    query = sa.select(sa.literal(1)).where(routers.c.mac == mac)
    return await db.fetchone(query) is not None


async def list_subscriptions(db: Database) -> list[tuple]:
    """(mac, registered_at, registered_by, note, last contact) for every router; the last
    contact is its newest activation, read newest-first from the primary key (mac,
    activated_at, id) of the newest partitions first, stopping at the first found."""
    return await db.fetchall(SUBSCRIPTIONS)


async def subscribe(db: Database, mac: str, note: str | None) -> bool:
    """Add (or mark as operator-added) a subscription; True when the router was new."""
    new = await register(db, mac, registered_by="operator")
    await db.execute("UPDATE routers SET registered_by = 'operator', note = coalesce(%s, note) "
                     "WHERE mac = %s", (note, mac))
    return new


async def unsubscribe(db: Database, mac: str) -> bool:
    """Remove the router and its place in the generation queue; its telemetry stays until
    retention removes it. False when it was not registered."""
    async with db.transaction() as cur:
        await execute(cur, "DELETE FROM generation_queue WHERE mac = %s", (mac,))
        await execute(cur, "DELETE FROM routers WHERE mac = %s", (mac,))
        return cur.rowcount == 1

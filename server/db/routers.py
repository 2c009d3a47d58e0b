"""Router registrations (subscriptions)."""

from __future__ import annotations

import sqlalchemy as sa

from server.db.pool import Database
from server.db.schema import routers


# One statement: a new router is registered and queued for its first generation together.
_REGISTER = (
    "WITH registered AS (INSERT INTO routers (mac, registered_by) VALUES (%(mac)s, %(by)s) "
    "ON CONFLICT (mac) DO NOTHING RETURNING mac) "
    "INSERT INTO generation_queue (mac) SELECT mac FROM registered ON CONFLICT DO NOTHING")


async def register(db: Database, mac: str, registered_by: str = "auto") -> bool:
    """Register `mac` and queue it for generation; return True when it was new."""
    return await db.execute(_REGISTER, {"mac": mac, "by": registered_by}) == 1


async def is_registered(db: Database, mac: str) -> bool:
    query = sa.select(sa.literal(1)).where(routers.c.mac == mac)
    return await db.fetchone(query) is not None

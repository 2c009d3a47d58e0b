"""Router registrations (subscriptions)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert

from server.db.pool import Database
from server.db.schema import routers


async def register(db: Database, mac: str, registered_by: str = "auto") -> bool:
    """Register `mac`; return True when it was new."""
    query = (insert(routers).values(mac=mac, registered_by=registered_by)
             .on_conflict_do_nothing(index_elements=["mac"]))
    return await db.execute(query) == 1


async def is_registered(db: Database, mac: str) -> bool:
    query = sa.select(sa.literal(1)).where(routers.c.mac == mac)
    return await db.fetchone(query) is not None

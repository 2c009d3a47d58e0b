"""The partitions job: every hour, create the time partitions of the coming days that do not
exist yet (server/db/partitions.py), so inserts never find no partition however long the
service runs. Start-up does the same before serving (server/db/migrate.prepare_schema)."""

from __future__ import annotations

import asyncio

from server.db.partitions import ensure_partitions
from server.db.pool import Database

PARTITIONS_CRON_SCHEDULE = "17 * * * *"


async def create_partitions_ahead(db: Database, days: int) -> dict:
    loop = asyncio.get_running_loop()
    created = await loop.run_in_executor(None, ensure_partitions, db.location, days)
    return {"created": created}

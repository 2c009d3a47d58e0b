"""The retention job: delete IDS events and CFM records received more than RETENTION_DAYS
ago. Scheduled on RETENTION_CRON_SCHEDULE only when DATA_RETENTION_ENABLED is true; an
operator can run it by hand with `router-backend retention`."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

from server.db.pool import Database
from server.db.retention import RETAINED_TABLES, delete_batch

BATCH_ROWS = 5_000
PAUSE_SECONDS = 0.01  # between batches: lets ingestion's statements through


async def run_retention(db: Database, days: int, batch_rows: int = BATCH_ROWS) -> dict:
    cutoff = datetime.now(timezone.utc) - timedelta(days=days)
    removed = {}
    for table in RETAINED_TABLES:
        removed[table] = 0
        while deleted := await delete_batch(db, table, cutoff, batch_rows):
            removed[table] += deleted
            await asyncio.sleep(PAUSE_SECONDS)
    return {"cutoff": cutoff.isoformat(), "removed": removed}

"""The retention job: delete IDS events and CFM records received more than RETENTION_DAYS
ago, in small batches: each batch is its own short statement, so ingestion into the same
tables is never held up for long. Scheduled on RETENTION_CRON_SCHEDULE only when
DATA_RETENTION_ENABLED is true; an operator can run it by hand with `router-backend
retention`."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

from server.db.pool import Database

RETAINED_TABLES = ("ids_events", "cfm_records")
BATCH_ROWS = 5_000
PAUSE_SECONDS = 0.01  # between batches: lets ingestion's statements through


async def run_retention(db: Database, days: int, batch_rows: int = BATCH_ROWS) -> dict:
    cutoff = datetime.now(timezone.utc) - timedelta(days=days)
    removed = {}
    for table in RETAINED_TABLES:
        removed[table] = 0
        while deleted := await _delete_batch(db, table, cutoff, batch_rows):
            removed[table] += deleted
            await asyncio.sleep(PAUSE_SECONDS)
    return {"cutoff": cutoff.isoformat(), "removed": removed}


async def _delete_batch(db: Database, table: str, cutoff: datetime, batch: int) -> int:
    statement = (f"DELETE FROM {table} WHERE (mac, id) IN (SELECT mac, id FROM {table} "
                 f"WHERE received_at < %(cutoff)s LIMIT %(batch)s)")
    return await db.execute(statement, {"cutoff": cutoff, "batch": batch})

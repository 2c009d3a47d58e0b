"""The retention job: delete IDS events and CFM records received more than RETENTION_DAYS ago,
and activations older than ACTIVATION_RETENTION_DAYS, in small batches: each batch is its own
short statement, so ingestion into the same tables is never held up for long. Scheduled on
RETENTION_CRON_SCHEDULE only when DATA_RETENTION_ENABLED is true; an operator can run it by
hand with `router-backend retention`."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

from server.db.pool import Database

TELEMETRY_TABLES = ("ids_events", "cfm_records")
TIME_COLUMNS = {"ids_events": "received_at", "cfm_records": "received_at",
                "activations": "activated_at"}
BATCH_ROWS = 5_000
PAUSE_SECONDS = 0.01  # between batches: lets ingestion's statements through


async def run_retention(db: Database, days: int, activation_days: int,
                        batch_rows: int = BATCH_ROWS) -> dict:
    now = datetime.now(timezone.utc)
    cutoffs = {table: now - timedelta(days=days) for table in TELEMETRY_TABLES}
    cutoffs["activations"] = now - timedelta(days=activation_days)
    removed = {}
    for table, cutoff in cutoffs.items():
        removed[table] = 0
        while deleted := await _delete_batch(db, table, cutoff, batch_rows):
            removed[table] += deleted
            await asyncio.sleep(PAUSE_SECONDS)
    return {"cutoff": cutoffs["ids_events"].isoformat(),
            "activation_cutoff": cutoffs["activations"].isoformat(), "removed": removed}


async def _delete_batch(db: Database, table: str, cutoff: datetime, batch: int) -> int:
    statement = (f"DELETE FROM {table} WHERE (mac, id) IN (SELECT mac, id FROM {table} "
                 f"WHERE {TIME_COLUMNS[table]} < %(cutoff)s LIMIT %(batch)s)")
    return await db.execute(statement, {"cutoff": cutoff, "batch": batch})

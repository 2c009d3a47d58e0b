"""Deleting old telemetry in small batches: each batch is its own short statement, so
ingestion into the same tables is never held up for long."""

from __future__ import annotations

from datetime import datetime

from server.db.pool import Database

RETAINED_TABLES = ("ids_events", "cfm_records")


async def delete_batch(db: Database, table: str, cutoff: datetime, batch: int) -> int:
    statement = (f"DELETE FROM {table} WHERE (mac, id) IN (SELECT mac, id FROM {table} "
                 f"WHERE received_at < %(cutoff)s LIMIT %(batch)s)")
    return await db.execute(statement, {"cutoff": cutoff, "batch": batch})

"""The row tables of before migration 0018 (`legacy_ids_events`, `legacy_cfm_records`, one
jsonb row per record) moved into chunks by the compaction job, a batch at a time (at most
20,000 rows and 32 MiB of records), each batch one transaction (rows deleted, their chunks
and summaries inserted: a crash loses and doubles nothing), and dropped once empty. Until
its batch is moved a record is not read by export or generation; `router-backend telemetry
compact` moves them all at once.

A record comes back as PostgreSQL's jsonb printed it (the same JSON value, keys in jsonb's
order). Its chunk holds one router's records of one UTC day.
"""

from __future__ import annotations

import asyncio
import itertools

from server.telemetry.sql import NEXT_LEGACY_ROWS, TAKE_LEGACY_ROWS
from server.db.pool import Database, execute
from server.telemetry.batch import upload_statements

LEGACY_TABLES = {"legacy_ids_events": "events", "legacy_cfm_records": "cfm"}
BATCH_ROWS = 20_000
BATCH_BYTES = 32 * 1024 * 1024   # of records' text a batch holds (records were up to 1 MiB)
PAUSE_SECONDS = 0.01


async def move_legacy_rows(db: Database, chunk_records: int) -> dict:
    """Records moved per table of before (absent: none left, or never there)."""
    moved = {}
    for table, kind in LEGACY_TABLES.items():
        if (await db.fetchone("SELECT to_regclass(%(t)s)", {"t": table}))[0] is None:
            continue
        moved[table] = 0
        while rows := await _move_batch(db, table, kind, chunk_records):
            moved[table] += rows
            await asyncio.sleep(PAUSE_SECONDS)
        await db.execute(f"DROP TABLE IF EXISTS {table}")
    return moved


async def _move_batch(db: Database, table: str, kind: str, chunk_records: int) -> int:
    async with db.transaction() as cur:
        await execute(cur, NEXT_LEGACY_ROWS.format(table=table), {"rows": BATCH_ROWS})
        batch = _within(await cur.fetchall(), BATCH_BYTES)
        if not batch:
            return 0
        await execute(cur, TAKE_LEGACY_ROWS.format(table=table),
                      {"macs": [row[0] for row in batch], "times": [row[1] for row in batch],
                       "ids": [row[2] for row in batch]})
        rows = sorted(await cur.fetchall(), key=lambda row: (row[0], row[1], row[2]))
        uploads = [(mac, received_at, [row[3].encode() for row in upload])
                   for (mac, received_at), upload in itertools.groupby(
                       rows, key=lambda row: (row[0], row[1]))]
        statements = await asyncio.to_thread(upload_statements, kind, uploads, chunk_records,
                                             cur)
        for statement in statements:
            await execute(cur, statement)
    return len(rows)


def _within(candidates: list[tuple], limit: int) -> list[tuple]:
    """The first candidates whose records add up to at most `limit` bytes (at least one)."""
    total = 0
    for count, (_, _, _, size) in enumerate(candidates):
        total += size
        if total > limit and count:
            return candidates[:count]
    return candidates

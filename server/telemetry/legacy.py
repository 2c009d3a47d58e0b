"""The row tables of before migration 0018 (`legacy_ids_events`, `legacy_cfm_records`, one
jsonb row per record) moved into chunks by the compaction job, a batch at a time, each batch
one transaction (rows deleted, their chunks and summaries inserted: a crash loses and doubles
nothing), and dropped once empty. Until its batch is moved a record is not read by export or
generation; `router-backend telemetry compact` moves them all at once.

A record comes back as PostgreSQL's jsonb printed it (the same JSON value, keys in jsonb's
order). Its chunk holds one router's records of one UTC day.
"""

from __future__ import annotations

import asyncio
import itertools
from datetime import datetime, timezone

import orjson

from server.db.chunks import (TAKE_LEGACY_ROWS, chunk_params, insert_chunk_statement,
                              insert_summary_statement, summary_params)
from server.db.pool import Database, execute
from server.ingest import extract
from server.telemetry.chunks import COMPACT_LEVEL, Chunk, compress, split
from server.telemetry.summary import Summary, hour_of

LEGACY_TABLES = {"legacy_ids_events": "events", "legacy_cfm_records": "cfm"}
BATCH_ROWS = 20_000
PAUSE_SECONDS = 0.01
_ROW_OF = {"events": extract.event_row, "cfm": extract.cfm_row}


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
        await execute(cur, TAKE_LEGACY_ROWS.format(table=table), {"rows": BATCH_ROWS})
        rows = sorted(await cur.fetchall(), key=lambda row: (row[0], row[1], row[2]))
        if not rows:
            return 0
        chunks, summaries = await asyncio.to_thread(_chunks_and_summaries, rows, kind,
                                                    chunk_records)
        for mac, piece, body in chunks:
            await execute(cur, insert_chunk_statement(),
                          {"mac": mac, "kind": kind, **chunk_params(piece, body)})
        for (mac, _), (summary, newest) in summaries.items():
            await execute(cur, insert_summary_statement(),
                          {"mac": mac, "kind": kind, **summary_params(summary, newest)})
    return len(rows)


def _chunks_and_summaries(rows: list[tuple], kind: str, chunk_records: int):
    """Chunks per router and UTC day (compressed), and summaries per router and hour."""
    chunks, summaries = [], {}
    for (mac, _day), day_rows in itertools.groupby(
            rows, key=lambda row: (row[0], row[1].astimezone(timezone.utc).date())):
        lines, times, counts = [], [], []
        for received_at, uploads in itertools.groupby(day_rows, key=lambda row: row[1]):
            records = [row[3].encode() for row in uploads]
            lines += records
            times.append(received_at)
            counts.append(len(records))
            _summarise(summaries, mac, kind, received_at, records)
        for piece in split(Chunk(lines, times, counts), chunk_records):
            chunks.append((mac, piece, compress(piece.lines, COMPACT_LEVEL)))
    return chunks, summaries


def _summarise(summaries: dict, mac: str, kind: str, received_at: datetime,
               records: list[bytes]) -> None:
    summary, newest = summaries.get((mac, hour_of(received_at)), (None, received_at))
    summary = summary or Summary()
    for line in records:
        record = orjson.loads(line)
        try:
            values = _ROW_OF[kind](record)
        except extract.RecordError:
            continue  # stored before these checks: kept, not summarised
        if kind == "events":
            summary.add_event(values, record)
        else:
            summary.add_flow(values)
    summaries[(mac, hour_of(received_at))] = (summary, max(newest, received_at))

"""A closed day's partition of telemetry_chunks rewritten once into a fresh table and swapped
in, giving back the space its day of merges left behind.

While a day is open, each router's remainder is merged again at each of the compaction
job's runs (compaction.py), and each run writes the new remainder while the old one is
still there; the day's small chunks come and go in its heap. Vacuum lets the partition
reuse that space while the day is open, but once it is closed no row comes to reuse it: at
the agent's cadence a closed day took 100 bytes a record on disk for 54 of rows
(docs/performance.md). So once a closed partition's merges are done, and if it takes more
than FREE_RATIO times what its rows would take written afresh (and a
mebibyte more), the job copies its rows
into a new table, in key order and in batches (each statement within DB_TIMEOUT_SECONDS),
and swaps that table in for it. `VACUUM FULL` would do the same holding the day away from
every reader for as long as the copy takes; here they wait only for the swap, which takes
its locks briefly (server/db/brief_locks.py) or is left for the next run.

Rows deleted from the partition while it was being copied (a router's removal) must not
come back: the swap, holding the partition alone, checks that its rows are still those
copied (their count and the sum of their ids: nothing inserts into a closed day but a
merge, whose rows take new ids above every id before them), and otherwise drops the copy
and leaves the day for the next run. A crash leaves at most the copy, unattached, which
the next try drops first.

Under Citus the new table would have to be distributed and colocated before the copy: not
built, closed days stay as they are there (docs/scaling.md).
"""

from __future__ import annotations

import psycopg

from server.db.brief_locks import with_brief_locks
from server.db.partitions import Partition
from server.db.pool import Database, execute

TABLE = "telemetry_chunks"
FREE_RATIO = 1.3        # rewritten when it takes more than this times its rows afresh
ROW_BYTES = 100         # a chunk row's fixed columns, tuple header and primary-key entry
TOAST_BYTES = 1.03      # a TOASTed value's bytes on disk per byte (2,000-byte pieces, 4 a page)
LEAST_FREE_BYTES = 1 << 20   # less is not worth a rewrite (a day of a few routers)
COPY_ROWS = 500         # chunks copied by one statement (500 routers' days: tens of MB)
_FIRST_KEY = ("00:00:00:00:00:00", "", "-infinity", -1)  # below every chunk's key

# What the partition takes on disk, and its rows' count and the bytes of their values that
# grow with the day: the body and the uploads' times and counts, as stored (pg_column_size
# reads a TOASTed value's size from its pointer: only the heap is read).
_USAGE = """SELECT pg_total_relation_size(%(name)s::regclass), count(*),
    coalesce(sum(pg_column_size(body) + pg_column_size(upload_times)
                 + pg_column_size(upload_records)), 0) FROM {partition}"""
_CREATE_COPY = """CREATE TABLE {copy} (LIKE {table} INCLUDING STORAGE INCLUDING CONSTRAINTS
    INCLUDING INDEXES, CONSTRAINT within_partition CHECK (received_at >= %(start)s
    AND received_at < %(end)s))"""
_COPY_BATCH = """INSERT INTO {copy} SELECT * FROM {partition}
WHERE (mac, kind, received_at, id) > (%(mac)s::macaddr, %(kind)s, %(received_at)s::timestamptz,
                                      %(id)s)
ORDER BY mac, kind, received_at, id LIMIT %(rows)s
RETURNING mac::text, kind, received_at, id"""
_ROWS = "SELECT count(*), coalesce(sum(id), 0) FROM {partition}"
_INDEXES = "SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = %(copy)s::regclass"


class _Changed(Exception):
    """The partition's rows changed while they were copied."""


def wasteful(disk_bytes: int, rows: int, value_bytes: int) -> bool:
    """Whether a partition of `rows` chunks holding `value_bytes` of bodies and upload
    arrays, taking `disk_bytes`, takes more than FREE_RATIO times what it would written
    afresh, and LEAST_FREE_BYTES more."""
    afresh = rows * ROW_BYTES + value_bytes * TOAST_BYTES
    return disk_bytes > max(FREE_RATIO * afresh, afresh + LEAST_FREE_BYTES)


async def rewrite_if_wasteful(db: Database, partition: Partition) -> dict | None:
    """Rewrite the closed `partition` when it is wasteful; what was done (bytes before and
    after, rows, whether swapped in), or None when it was not."""
    if partition.start is None:   # the legacy partition (MINVALUE) is no day
        return None
    bounds = f"FROM ('{partition.start.isoformat()}') TO ('{partition.end.isoformat()}')"
    before, rows, value_bytes = await db.fetchrow(_USAGE.format(partition=partition.name),
                                                  {"name": partition.name})
    if not wasteful(before, rows, value_bytes):
        return None
    copy = f"{partition.name}_rewrite"
    await db.execute(f"DROP TABLE IF EXISTS {copy}")
    await db.execute(_CREATE_COPY.format(copy=copy, table=TABLE),
                     {"start": partition.start, "end": partition.end})
    copied = await _copy(db, partition.name, copy)
    try:
        swapped = await with_brief_locks(
            db, lambda cur: _swap(cur, partition.name, bounds, copy, copied))
    except _Changed:
        swapped = False
    if not swapped:
        await db.execute(f"DROP TABLE {copy}")
        return {"partition": partition.name, "swapped": False, "bytes_before": before}
    (after,) = await db.fetchrow("SELECT pg_total_relation_size(%(name)s::regclass)",
                                 {"name": partition.name})
    return {"partition": partition.name, "swapped": True, "rows": rows,
            "bytes_before": before, "bytes_after": after}


async def _copy(db: Database, partition: str, copy: str) -> tuple[int, int]:
    """Copy the partition's rows into `copy` in key order; their count and sum of ids."""
    statement = _COPY_BATCH.format(copy=copy, partition=partition)
    key, rows, ids = _FIRST_KEY, 0, 0
    while batch := await db.fetchall(statement, {
            "mac": key[0], "kind": key[1], "received_at": key[2], "id": key[3],
            "rows": COPY_ROWS}):
        key = max(batch)
        rows += len(batch)
        ids += sum(row[3] for row in batch)
    return rows, ids


async def _swap(cur: psycopg.AsyncCursor, name: str, bounds: str, copy: str,
                copied: tuple[int, int]) -> None:
    """Within one transaction: the partition `name` detached, found unchanged, the copy
    attached in its place (FOR VALUES `bounds`) under its name, the partition dropped."""
    await execute(cur, f"ALTER TABLE {TABLE} DETACH PARTITION {name}")
    await execute(cur, _ROWS.format(partition=name))
    if tuple(await cur.fetchone() or ()) != copied:
        raise _Changed
    # The copy's check constraint already implies the bounds: ATTACH does not scan it.
    await execute(cur, f"ALTER TABLE {TABLE} ATTACH PARTITION {copy} FOR VALUES {bounds}")
    await execute(cur, f"ALTER TABLE {copy} DROP CONSTRAINT within_partition")
    await execute(cur, f"DROP TABLE {name}")
    await execute(cur, f"ALTER TABLE {copy} RENAME TO {name}")
    await execute(cur, _INDEXES, {"copy": name})
    for (index,) in await cur.fetchall():
        await execute(cur, f"ALTER INDEX {index} RENAME TO {index.replace(copy, name, 1)}")

"""Partitions taken out of their table and dropped without holding its users up: detached
`CONCURRENTLY` (which never blocks inserts or reads of the parent), or under Citus, which
refuses that, with a plain DETACH whose locks wait briefly (brief_locks.py); then dropped
by one statement. What a crash left half done is finished by the next call: a detach
still pending, a detached partition not yet dropped. For retention (server/jobs/
retention.py) and the packed summaries (server/telemetry/summary_days.py)."""

from __future__ import annotations

from datetime import datetime

import psycopg

from server.db.brief_locks import with_brief_locks
from server.db.citus import distributed_tables
from server.db.partitions import Partition
from server.db.pool import Database, execute

# Tables of this table's partition names that are no longer attached: detached by a run
# that died before its DROP (a partition is created and attached in one transaction, so
# no other process ever sees one unattached).
_DETACHED = r"""
SELECT relname FROM pg_class
WHERE relkind = 'r' AND NOT relispartition AND relnamespace = current_schema()::regnamespace
  AND (relname = %(table)s || '_legacy'
       OR (relname ~ ('^' || %(table)s || '_p[0-9]{8}$')
           AND to_date(right(relname, 8), 'YYYYMMDD') < %(cutoff)s::date))
ORDER BY relname"""


async def drop_partitions(db: Database, table: str, partitions: list[Partition],
                          cutoff: datetime) -> tuple[list[str], list[str]]:
    """Detach and drop `partitions` of `table`, and any of its partitions starting before
    `cutoff` that an earlier call detached without dropping; the names dropped, and those
    left for the next call (their table kept busy)."""
    dropped = [name for (name,) in await db.fetchall(_DETACHED, {"table": table,
                                                                 "cutoff": cutoff})]
    concurrently = table not in await distributed_tables(db)
    deferred = []
    for partition in partitions:
        if not await detach(db, table, partition, concurrently):
            deferred.append(partition.name)
        elif partition.name not in dropped:  # a pending detach is listed by both
            dropped.append(partition.name)
    if dropped:
        await db.execute(f"DROP TABLE {', '.join(dropped)}")
    return dropped, deferred


async def detach(db: Database, table: str, partition: Partition, concurrently: bool) -> bool:
    """Detach `partition`; False when it could not be now (under Citus: left for the next
    call)."""
    if not concurrently:
        return await detach_locking(db, table, partition)
    # CONCURRENTLY cannot run inside a transaction block: each statement is its own
    # (the pool's connections are in autocommit mode).
    mode = "FINALIZE" if partition.detaching else "CONCURRENTLY"
    await db.execute(f"ALTER TABLE {table} DETACH PARTITION {partition.name} {mode}")
    return True


async def detach_locking(db: Database, table: str, partition: Partition) -> bool:
    """A plain DETACH, for a distributed table (Citus refuses CONCURRENTLY). It needs the
    parent alone, so it waits briefly (brief_locks.py): uploads are never held up long, and
    a partition it could not detach is left for the next call."""
    async def detach_now(cur: psycopg.AsyncCursor) -> None:
        await execute(cur, f"ALTER TABLE {table} DETACH PARTITION {partition.name}")
    return await with_brief_locks(db, detach_now)

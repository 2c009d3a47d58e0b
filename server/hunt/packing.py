"""Packing the hunt index: every day before today moved out of `hunt_postings` (a row and a
B-tree entry per posting, about 140 bytes) into compressed blocks (hunt_blocks.py, a few
bytes a posting), by `router-backend hunt compact` and the `hunt-compact` job.

A day is packed in one REPEATABLE READ transaction: its rows are read in the order of their
values' hashes, cut into 2^bits buckets of about BLOCK_POSTINGS postings, written as blocks,
and the rows read deleted. The snapshot makes the read and the delete see the same rows:
postings an upload committed meanwhile (one that began before midnight) stay in rows, and
the next run packs them beside the first blocks (a new `pass`). A crash at any moment
leaves the day either in rows or in blocks, never in both or neither. Hunts read both
(server/hunt/sightings.py), so a day answers the same before and after it is packed.
"""

from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

import numpy as np
import psycopg

from server.hunt import sql as hunt_db
from server.db.partitions import LIST_PARTITIONS, partitions_from_rows
from server.db.pool import Database
from server.hunt.blocks import Postings, encode

log = logging.getLogger("router_backend.hunt")

BLOCK_POSTINGS = 2_048  # a block's postings, about: a rare value's hunt reads one a day
# (8,192: 9.1 bytes a posting at 10,000 routers, a rare value's 30 days 27 ms; 2,048: 0.4
# bytes more, 30 % less time)
MAX_BITS = 24
FETCH_ROWS = 50_000
TRIES = 3  # a day's packing, against concurrent writes
PACKING_LOCK = 7_302_145_059  # one packer at a time, across processes and hosts
BUDGETS_KEPT = timedelta(days=7)  # routers' daily counts of postings, for status
EMPTY_BYTES = 65_536  # an empty partition's own pages and its index's first ones


def bits_for(postings: int) -> int:
    """How many of a hash's top bits name a day's buckets, for `postings` postings."""
    if postings <= BLOCK_POSTINGS:
        return 0
    return min(MAX_BITS, math.ceil(math.log2(postings / BLOCK_POSTINGS)))


def bucket_of(value_hash: int, bits: int) -> int:
    """The bucket of a signed 64-bit hash: its top `bits` bits, signed (0 when bits is 0)."""
    return value_hash >> (64 - bits) if bits else 0


@dataclass
class PackedDays:
    """What a packing run did: the days it packed, their postings and the bytes written."""
    days: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)  # met concurrent writes TRIES times
    postings: int = 0
    bytes: int = 0

    def as_detail(self) -> dict:
        return {"days": self.days, "left_for_next_run": self.left,
                "postings": self.postings, "bytes": self.bytes,
                "bytes_per_posting": round(self.bytes / self.postings, 2)
                if self.postings else None}


async def pack(db: Database, before: datetime | None = None) -> PackedDays:
    """Every day before `before` (by default today's start, UTC) still in rows, packed. A
    day whose packing met a concurrent write (an upload ending late, a router removed) is
    tried again, and left for the next run after TRIES; the later days are packed anyway."""
    now = datetime.now(timezone.utc)
    before = before or now.replace(hour=0, minute=0, second=0, microsecond=0)
    done = PackedDays()
    async with db.session() as cur:  # its own connection: a day may take minutes
        await cur.execute("SELECT pg_try_advisory_lock(%s)", (PACKING_LOCK,))
        if not (await cur.fetchone())[0]:
            log.info("hunt packing: another run holds the lock")
            return done
        await cur.execute(hunt_db.SEED)
        seed = (await cur.fetchone())[0]
        await cur.execute(hunt_db.DAYS_TO_PACK, {"before": before})
        for (day,) in await cur.fetchall():
            for attempt in range(1, TRIES + 1):
                try:
                    postings, size = await _pack_day(cur.connection, day, seed)
                    break
                except psycopg.errors.SerializationFailure:
                    log.info("hunt packing: %s met a concurrent write (try %d of %d)",
                             day.date(), attempt, TRIES)
            else:
                done.left.append(day.astimezone(timezone.utc).date().isoformat())
                continue
            done.days.append(day.astimezone(timezone.utc).date().isoformat())
            done.postings += postings
            done.bytes += size
        await _emptied(cur, before)
        for old in (hunt_db.OLD_BUDGETS, hunt_db.OLD_NETWORK_BUDGETS):
            await cur.execute(old, {"before": before - BUDGETS_KEPT})
    return done


async def _pack_day(conn: psycopg.AsyncConnection, day: datetime,
                    seed: int) -> tuple[int, int]:
    """One day's rows into blocks; (postings, bytes). Under PACKING_DAY_LOCK, taken before
    the transaction's snapshot, so that a router removed just before is seen removed."""
    await conn.execute("SELECT pg_advisory_lock(%s)", (hunt_db.PACKING_DAY_LOCK,))
    await conn.set_isolation_level(psycopg.IsolationLevel.REPEATABLE_READ)
    try:
        async with conn.transaction():
            cur = conn.cursor()
            await cur.execute(hunt_db.NUMBER_ROUTERS, {"day": day})
            await cur.execute(hunt_db.DAY_ROUTERS, {"day": day})
            numbers = dict(await cur.fetchall())
            await cur.execute(hunt_db.DAY_POSTINGS, {"day": day})
            count = (await cur.fetchone())[0]
            await cur.execute(hunt_db.PACKED_DAY, {"day": day})
            known = await cur.fetchone()
            bits = known[0] if known else bits_for(count)
            await cur.execute(hunt_db.NEXT_PASS, {"day": day})
            pass_number = (await cur.fetchone())[0]
            writer = _BlockWriter(cur, day, bits, pass_number)
            async with conn.cursor(name="hunt_day_rows") as rows:
                await rows.execute(hunt_db.DAY_ROWS, {"day": day, "seed": seed})
                while batch := await rows.fetchmany(FETCH_ROWS):
                    await writer.add(batch, numbers)
            await writer.flush()
            await cur.execute(hunt_db.PACKED, {"day": day, "bits": bits,
                                               "postings": writer.postings,
                                               "bytes": writer.bytes})
            await cur.execute(hunt_db.UNPACKED_ROWS_GONE, {"day": day})
    finally:
        await conn.set_isolation_level(None)
        await conn.execute("SELECT pg_advisory_unlock(%s)", (hunt_db.PACKING_DAY_LOCK,))
    log.info("hunt packing: %s, %d postings in %d bytes", day.date(), writer.postings,
             writer.bytes)
    return writer.postings, writer.bytes


async def _emptied(cur: psycopg.AsyncCursor, before: datetime) -> None:
    """The partitions of days packed whole, truncated: a DELETE leaves their B-tree's pages
    (VACUUM frees them for reuse, but no later row lands in a past day's partition). Each
    is locked for a moment, checked empty in that lock, and skipped when busy (a hunt
    reading it): the next run tries again."""
    await cur.execute(LIST_PARTITIONS, {"table": "hunt_postings"})
    for partition in partitions_from_rows(await cur.fetchall()):
        if partition.end > before:
            continue
        await cur.execute(hunt_db.PARTITION_BYTES, {"name": partition.name})
        if (await cur.fetchone())[0] <= EMPTY_BYTES:
            continue
        try:
            async with cur.connection.transaction():
                await cur.execute("SET LOCAL lock_timeout = '1s'")
                await cur.execute(f"LOCK TABLE {partition.name} IN ACCESS EXCLUSIVE MODE")
                await cur.execute(f"SELECT EXISTS (SELECT 1 FROM {partition.name})")
                if not (await cur.fetchone())[0]:
                    await cur.execute(f"TRUNCATE {partition.name}")
        except psycopg.errors.LockNotAvailable:
            log.info("hunt packing: %s busy, truncated at the next run", partition.name)


class _BlockWriter:
    """Rows in hash order, cut into their buckets' blocks as each bucket ends."""

    def __init__(self, cur: psycopg.AsyncCursor, day: datetime, bits: int,
                 pass_number: int) -> None:
        self.cur, self.day, self.bits, self.pass_number = cur, day, bits, pass_number
        self.pending: list[tuple] = []
        self.bucket: int | None = None
        self.postings = self.bytes = 0

    async def add(self, rows: list[tuple], numbers: dict[str, int]) -> None:
        for value_hash, mac, records, first, span in rows:
            bucket = bucket_of(value_hash, self.bits)
            if bucket != self.bucket:
                await self.flush()
                self.bucket = bucket
            self.pending.append((value_hash, numbers[mac], records, first, span))

    async def flush(self) -> None:
        if not self.pending:
            return
        rows, self.pending = self.pending, []
        block = await asyncio.to_thread(_block_of, rows)
        await self.cur.execute(hunt_db.ADD_BLOCK, {
            "day": self.day, "bucket": self.bucket, "pass": self.pass_number,
            "postings": len(rows), "block": block})
        self.postings += len(rows)
        self.bytes += len(block)


def _block_of(rows: list[tuple]) -> bytes:
    hashes, routers, records, first, span = zip(*rows)
    postings = Postings(np.array(hashes, dtype=np.int64), np.array(routers, dtype=np.uint32),
                        np.array(records, dtype=np.uint32),
                        np.array(first, dtype=np.uint32), np.array(span, dtype=np.uint32))
    order = np.lexsort((postings.routers, postings.hashes))
    return encode(Postings(*(column[order] for column in (
        postings.hashes, postings.routers, postings.records, postings.first, postings.span))))


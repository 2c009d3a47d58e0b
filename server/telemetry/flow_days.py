"""A router's hourly flow summaries of a closed day packed into one row of
telemetry_flow_days (migration 0035), by the compaction job.

The flow summaries keep a row per router, hour and destination port (or application
protocol) seen; at the agent's cadence most ports are seen once an hour, so a router-day
took 528 rows of about 200 bytes (a heap row and two index entries for a handful of
numbers): 110 bytes a record for each day kept, two thirds of the summaries
(docs/performance.md). Once a partition's days are over and settled, no upload adds to its
hours: each router's rows of each of its days are written as one row of arrays, an entry
per row, a few hundred routers a statement, and then the partition is dropped (detached as
retention detaches: server/db/detach.py), which gives its space back at once; deleting the
rows would have left it to vacuum, and the indexes' pages for good.

Generation reads the packed rows with the open days' rows (server/telemetry/sql.py
FLOWS_IN_WINDOW), the same sums hour by hour, and skips a router's rows of a day it finds
packed: a crash between the packing and the drop counts nothing twice, and the next run
packs what is left (a day already packed is kept as it is) and drops the partition. The
legacy partition (migration 0018's, the days before it) is left to retention.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from server.db.detach import drop_partitions
from server.db.partitions import LIST_PARTITIONS, Partition, partitions_from_rows
from server.db.pool import Database
from server.telemetry.sql import PACK_FLOW_DAYS, PARTITION_FLOW_ROUTERS

TABLE = "telemetry_flows"
DAY = timedelta(days=1)
ROUTERS_A_STATEMENT = 200   # a router-day is about 528 rows
PAUSE_SECONDS = 0.01        # between statements: lets ingestion's statements through


async def pack_flow_days(db: Database, settled: datetime) -> dict:
    """Pack every day partition of the hourly flow rows that ended by `settled`, then drop
    it; the partitions dropped, the router-days packed, the partitions whose drop was left
    for the next run."""
    closed = [partition for partition in partitions_from_rows(
                  await db.fetchall(LIST_PARTITIONS, {"table": TABLE}))
              if partition.start is not None and partition.end <= settled]
    router_days = 0
    for partition in closed:
        router_days += await _pack(db, partition)
    dropped, deferred = await drop_partitions(db, TABLE, closed, settled)
    return {"partitions_dropped": dropped, "router_days": router_days,
            "partitions_deferred": deferred}


async def _pack(db: Database, partition: Partition) -> int:
    """Pack `partition`'s days, router by router; the router-days written."""
    if partition.detaching:   # packed already: its drop was interrupted
        return 0
    macs = [mac for (mac,) in await db.fetchall(
        PARTITION_FLOW_ROUTERS.format(partition=partition.name))]
    written = 0
    for first in range(0, len(macs), ROUTERS_A_STATEMENT):
        for day in _days(partition):
            written += await db.execute(PACK_FLOW_DAYS, {
                "macs": macs[first:first + ROUTERS_A_STATEMENT], "day": day,
                "end": day + DAY})
            await asyncio.sleep(PAUSE_SECONDS)
    return written


def _days(partition: Partition) -> list[datetime]:
    """The UTC days of a partition (TELEMETRY_PARTITION_DAYS long, on a grid of days)."""
    assert partition.start is not None
    return [partition.start + n * DAY for n in range((partition.end - partition.start) // DAY)]

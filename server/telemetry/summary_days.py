"""A router's hourly summaries of a closed day packed into one row a router, by the
compaction job: flows into telemetry_flow_days (migration 0035), alerts into
telemetry_alert_days (migration 0036).

The hourly summaries keep a row per router, hour and key (a destination port or an
application protocol; a signature between two addresses): at the agent's cadence a
router-day took 528 flow rows and about 190 alert rows of some 200-300 bytes each (a heap
row and two index entries for a handful of values), 169 bytes a record for each day kept,
most of a router's summaries (docs/performance.md). Once a partition's days are over and
settled no upload adds to their hours: each router's rows of each day are written as one
row of arrays, an entry per row, about 100,000 rows a statement, and then the partition
is dropped (detached as retention detaches: server/db/detach.py), which gives its space
back at once; deleting the rows would have left the heap to vacuum and the indexes' pages
for good.

The open day's flows are packed too, as its hours settle: each run appends the hours
settled since the last to the router-day's packed row (its `through`, migration 0037) and
deletes their rows in the same transaction, so that the day's flow rows are only the last
hour or so (at the agent's cadence they took 110 bytes a record by the end of the day); the
day is then closed as any other. The open day's alerts stay rows: the fleet job reads them.

Generation and the console's router page read the packed rows with the rows of the days not
packed (server/telemetry/sql.py FLOWS_IN_WINDOW, alerts_in_window), the same values hour by
hour, and skip a router's rows of a day they find packed (up to its `through`): a crash
between the packing and the drop counts nothing twice, and the next run packs what is left
(a day packed already is kept as it is) and drops the partition. The fleet job reads the
alert rows of FLEET_WINDOW_HOURS across the fleet as rows: alerts are packed only once the
day is past that window too. The legacy partitions (migration 0018's, the days before it)
are left to retention.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime, timedelta

from server.db import jobs as ledger
from server.db.detach import drop_partitions
from server.db.partitions import LIST_PARTITIONS, Partition, partitions_from_rows
from server.db.pool import Database, execute
from server.telemetry.sql import (DELETE_PACKED_FLOWS, PACK_ALERT_DAYS, PACK_FLOW_HOURS,
                                  PARTITION_ROUTERS)

DAY = timedelta(days=1)
HOUR = timedelta(hours=1)
ROUTERS_A_PAGE = 1_000     # routers listed by one statement
ROWS_A_STATEMENT = 100_000  # about 200 routers' days at the agent's cadence; a router
                           # sending more (a hostile one: any port, any hour) goes alone
# A router-day with more rows is left as rows, and its partition kept until retention: a
# packed row's arrays must stay under PostgreSQL's 1 GB a value (an alert row with 64 flow
# ids is about 2.7 KB of them). The agent's cadence makes 528 flow rows a day.
ROWS_A_ROUTER = 200_000
PAUSE_SECONDS = 0.01        # between statements: lets ingestion's statements through


@dataclass(frozen=True)
class Summaries:
    table: str        # the hourly rows' table
    # the statement packing some routers' rows of a day (%(macs)s, %(day)s, %(end)s; its
    # hours before %(through)s, where a day can be packed in part)
    pack: str
    # the statement deleting the rows a pack of an open day moved; None: packed once closed
    packed_rows: str | None = None


FLOWS = Summaries("telemetry_flows", PACK_FLOW_HOURS, DELETE_PACKED_FLOWS)
ALERTS = Summaries("telemetry_alerts", PACK_ALERT_DAYS)


async def pack_summary_days(db: Database, now: datetime, settle: timedelta,
                            fleet_window: timedelta) -> dict:
    """Pack the hourly summaries' day partitions that ended `settle` before `now` (the
    alerts' also before the fleet job's window, `fleet_window` and the hour it counts
    besides), and the open day's settled hours of flows; for each table, what `pack_days`
    did (the flows' `open_day`: what `pack_open_hours` did)."""
    settled = now - settle
    flows = await pack_days(db, FLOWS, settled)
    flows["open_day"] = await pack_open_hours(db, FLOWS, settled)
    return {"flows": flows, "alerts": await pack_days(db, ALERTS, min(
        settled, now - fleet_window - timedelta(hours=1)))}


async def pack_days(db: Database, summaries: Summaries, closed_by: datetime) -> dict:
    """Pack every day partition of `summaries` that ended by `closed_by`, then drop it; the
    partitions dropped, the router-days packed, the partitions whose drop was left for the
    next run."""
    closed = [partition for partition in await _partitions(db, summaries.table)
              if partition.start is not None and partition.end <= closed_by]
    router_days, kept, left = 0, [], 0
    for partition in closed:   # one detaching was packed already: its drop was interrupted
        written, too_large = (0, 0) if partition.detaching else await _pack(
            db, summaries, partition, [(day, 24) for day in _days(partition)], None)
        router_days += written
        if too_large:   # its rows stay: so does the partition (readers skip packed days)
            kept.append(partition)
            left += too_large
    droppable = [partition for partition in closed if partition not in kept]
    # Under retention's lock, as the activation-days job drops: the two never detach the
    # same partition at once. Held by a retention run, the drop waits for the next run.
    dropped: list[str] = []
    deferred = [partition.name for partition in droppable]
    if droppable:
        async with ledger.exclusive(db, "retention") as acquired:
            if acquired:
                dropped, deferred = await drop_partitions(db, summaries.table, droppable,
                                                          closed_by)
    return {"partitions_dropped": dropped, "router_days": router_days,
            "partitions_deferred": deferred,
            "partitions_kept": [partition.name for partition in kept],
            "routers_left_as_rows": left}


async def pack_open_hours(db: Database, summaries: Summaries, settled: datetime) -> dict:
    """Pack the settled hours (ended by `settled`) of the partition still open, for the
    summaries packed as their day goes (`packed_rows`): the router-days whose packed row
    was written or grown, and the routers left as rows (more than ROWS_A_ROUTER)."""
    written = left = 0
    if summaries.packed_rows is None:
        return {"router_days": written, "routers_left_as_rows": left}
    open_now = [partition for partition in await _partitions(db, summaries.table)
                if partition.start is not None and partition.start <= settled < partition.end]
    for partition in open_now:
        hours = [(day, min(24, (settled - day) // HOUR)) for day in _days(partition)]
        if days := [(day, through) for day, through in hours if through > 0]:
            grown, too_large = await _pack(db, summaries, partition, days,
                                           summaries.packed_rows)
            written, left = written + grown, left + too_large
    return {"router_days": written, "routers_left_as_rows": left}


async def _partitions(db: Database, table: str) -> list[Partition]:
    return partitions_from_rows(await db.fetchall(LIST_PARTITIONS, {"table": table}))


async def _pack(db: Database, summaries: Summaries, partition: Partition,
                days: list[tuple[datetime, int]], delete: str | None) -> tuple[int, int]:
    """Pack `partition`'s `days` (each up to its hour), some routers at a time; the
    router-days written, and the routers left as rows (more than ROWS_A_ROUTER). The rows
    packed are deleted by `delete` where the partition is still open (a closed one is
    dropped whole: None)."""
    written, left, after = 0, 0, None
    listed = PARTITION_ROUTERS.format(partition=partition.name)
    while routers := await db.fetchall(listed, {"first": after is None, "after": after,
                                                "routers": ROUTERS_A_PAGE}):
        packable = [(mac, rows) for mac, rows in routers if rows <= ROWS_A_ROUTER]
        left += len(routers) - len(packable)
        for macs in _batches(packable):
            for day, through in days:
                written += await _pack_batch(db, summaries.pack, delete, {
                    "macs": macs, "day": day, "end": day + DAY, "through": through})
                await asyncio.sleep(PAUSE_SECONDS)
        after = routers[-1][0]
    return written, left


async def _pack_batch(db: Database, pack: str, delete: str | None, params: dict) -> int:
    """One statement's routers of one day packed (and their packed rows deleted by
    `delete`, when given, in the same transaction); the router-days written."""
    if delete is None:
        return await db.execute(pack, params)
    async with db.transaction() as cur:
        await execute(cur, pack, params)
        written = cur.rowcount
        await execute(cur, delete, params)
    return written


def _batches(routers: list[tuple[str, int]]) -> list[list[str]]:
    """The routers (MAC, rows) in batches of about ROWS_A_STATEMENT rows, so that a
    statement's arrays stay bounded in memory and time whatever a router sent."""
    batches: list[list[str]] = [[]]
    rows = 0
    for mac, count in routers:
        if batches[-1] and rows + count > ROWS_A_STATEMENT:
            batches.append([])
            rows = 0
        batches[-1].append(mac)
        rows += count
    return [batch for batch in batches if batch]


def _days(partition: Partition) -> list[datetime]:
    """The UTC days of a partition (TELEMETRY_PARTITION_DAYS long, on a grid of days)."""
    assert partition.start is not None
    return [partition.start + n * DAY for n in range((partition.end - partition.start) // DAY)]

"""The retention job: telemetry received more than RETENTION_DAYS ago, hourly summaries
older than their readers look back (server/telemetry/summary.py summaries_kept: a week and
an hour at the defaults; a packed day of them while any of its hours is, and packed alert
days as long as owners are shown alerts, ALERTS_LISTED_DAYS and a day, at most
RETENTION_DAYS), activations
older than ACTIVATION_RETENTION_DAYS and the hunt index older than HUNT_RETENTION_DAYS go
by whole partitions; the routers' enforcement reports after 31 days, by one delete. A chunk goes when its newest
record is older than the cut-off (a merged chunk holds one router's records of at most one
partition: a day).

For each table, every partition entirely older than the cut-off is detached with
`DETACH PARTITION ... CONCURRENTLY` (which never blocks inserts or reads of the parent;
under Citus, which refuses it, a plain DETACH: server/db/detach.py), then
all are dropped by one statement (one commit): no row is deleted one by one, no WAL is
written for its rows, nothing is left for vacuum. Only the one partition that straddles the
cut-off is trimmed, by small batched deletes, each its own short statement. What a crash
left half done is finished: a detach still pending, a detached partition not yet dropped.

Rows in dropped partitions are not counted (that would read them all); the job reports the
partitions dropped with PostgreSQL's estimate of their rows, and the exact count of rows
deleted from the straddling partition.

Scheduled on RETENTION_CRON_SCHEDULE only when DATA_RETENTION_ENABLED is true; an operator can
run it by hand with `router-backend retention`.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

from server.db.detach import drop_partitions
from server.db.partitions import LIST_PARTITIONS, TIME_COLUMNS, Partition, partitions_from_rows
from server.db.pool import Database
from server.enforcement import sql as enforcement_sql
from server.hunt.sql import EXPIRED_PACKED_DAYS
from server.telemetry.summary import ALERTS_LISTED_DAYS

SUMMARY_TABLES = ("telemetry_alerts", "telemetry_flows")
PACKED_SUMMARY_TABLES = ("telemetry_alert_days", "telemetry_flow_days")
DAY = timedelta(days=1)
BATCH_ROWS = 5_000  # rows, or a router's hours (days) of summaries
ENFORCEMENT_KEPT = timedelta(days=31)  # the figures look back 30 days
PAUSE_SECONDS = 0.01  # between batches: lets ingestion's statements through


async def run_retention(db: Database, days: int, activation_days: int,
                        batch_rows: int = BATCH_ROWS, now: datetime | None = None,
                        hunt_days: int | None = None,
                        summaries_kept: timedelta | None = None) -> dict:
    """`hunt_days`: the hunt index's days (HUNT_RETENTION_DAYS); `summaries_kept`: how long
    the hourly summaries are (server/telemetry/summary.py summaries_kept); by default
    `days` both."""
    now = now or datetime.now(timezone.utc)
    cutoffs = {table: now - timedelta(days=days) for table in TIME_COLUMNS}
    for table in ("activations", "activation_days"):
        cutoffs[table] = now - timedelta(days=activation_days)
    for table in SUMMARY_TABLES:
        cutoffs[table] = now - (summaries_kept or timedelta(days=days))
    # A packed day is kept while any of its hours is (server/telemetry/summary_days.py).
    for table in PACKED_SUMMARY_TABLES:
        cutoffs[table] = cutoffs["telemetry_alerts"] - DAY
    # Packed alert days as far back as owners are shown alerts, at most as long as records.
    cutoffs["telemetry_alert_days"] = max(
        now - timedelta(days=days),
        min(cutoffs["telemetry_alert_days"], now - timedelta(days=ALERTS_LISTED_DAYS) - DAY))
    cutoffs["hunt_postings"] = now - timedelta(days=hunt_days or days)
    removed = {}
    for table, cutoff in cutoffs.items():
        removed[table] = await trim_table(db, table, cutoff, batch_rows)
    removed["hunt_packed"] = {
        "partitions_dropped": [], "rows_in_dropped_partitions_estimate": 0,
        "rows_deleted": await db.execute(EXPIRED_PACKED_DAYS,
                                         {"cutoff": cutoffs["hunt_postings"]}),
        "partitions_deferred": []}
    removed["enforcement"] = {
        "partitions_dropped": [], "rows_in_dropped_partitions_estimate": 0,
        "rows_deleted": await db.execute(enforcement_sql.EXPIRED,
                                         {"before": (now - ENFORCEMENT_KEPT).date()}),
        "partitions_deferred": []}
    return {"cutoff": cutoffs["telemetry_chunks"].isoformat(),
            "summary_cutoff": cutoffs["telemetry_alerts"].isoformat(),
            "packed_summary_cutoff": cutoffs["telemetry_flow_days"].isoformat(),
            "activation_cutoff": cutoffs["activations"].isoformat(),
            "hunt_cutoff": cutoffs["hunt_postings"].isoformat(), "removed": removed}


async def trim_table(db: Database, table: str, cutoff: datetime, batch_rows: int = BATCH_ROWS
                     ) -> dict:
    """`table`'s rows older than `cutoff` gone: whole partitions dropped, the straddling one
    trimmed in batches."""
    outcome = {"partitions_dropped": [], "rows_in_dropped_partitions_estimate": 0,
               "rows_deleted": 0, "partitions_deferred": []}
    old = []
    for partition in partitions_from_rows(await db.fetchall(LIST_PARTITIONS, {"table": table})):
        if partition.detaching or partition.older_than(cutoff):
            old.append(partition)
        elif partition.straddles(cutoff):
            outcome["rows_deleted"] += await _delete_older(db, table, partition, cutoff,
                                                           batch_rows)
    dropped, deferred = await drop_partitions(db, table, old, cutoff)
    outcome["partitions_dropped"], outcome["partitions_deferred"] = dropped, deferred
    outcome["rows_in_dropped_partitions_estimate"] = sum(
        partition.rows_estimate for partition in old if partition.name in dropped)
    return outcome


# The straddling partition is trimmed in batches picked by key, not by `ctid` (which under
# Citus names a row only within one shard): rows where the key is unique, a router's hour or
# day of summaries where it is not.
_BATCH_KEYS = {"telemetry_chunks": ("mac, kind, received_at, id", True),
               "activations": ("mac, activated_at, id", True),
               "telemetry_alerts": ("mac, hour", False),
               "telemetry_flows": ("mac, hour", False),
               "telemetry_flow_days": ("mac, day", True),
               "telemetry_alert_days": ("mac, day", True),
               "activation_days": ("mac, day", False),
               "hunt_postings": ("mac, day", False)}


def batch_statement(table: str, partition: str) -> str:
    """Delete one batch of `partition`'s rows older than the cut-off (of `table`)."""
    key, unique = _BATCH_KEYS[table]
    column = TIME_COLUMNS[table]
    batch = (f"SELECT {key} FROM {partition} WHERE {column} < %(cutoff)s" if unique else
             f"SELECT DISTINCT {key} FROM {partition} WHERE {column} < %(cutoff)s "
             f"ORDER BY {key}")
    return (f"DELETE FROM {partition} WHERE {column} < %(cutoff)s AND ({key}) IN ("
            f"{batch} LIMIT %(batch)s)")


async def _delete_older(db: Database, table: str, partition: Partition, cutoff: datetime,
                        batch_rows: int) -> int:
    statement = batch_statement(table, partition.name)
    deleted = 0
    while removed := await db.execute(statement, {"cutoff": cutoff, "batch": batch_rows}):
        deleted += removed
        await asyncio.sleep(PAUSE_SECONDS)
    return deleted

"""Time partitions at fleet scale: retention by partition drop against the batched delete of
the same rows, and the monthly access report over millions of activations, before and after.

    python -m bench.partitions [--rows 10000000] [--activations 10000000] [--days 30]

One database holds both layouts with the same rows: the service's partitioned `activations`
(daily partitions for the last --days days) and a plain copy shaped as before migration 0014
(key (mac, id), the same BRIN index).

1. Retention: activations and its plain copy hold --rows rows spread evenly over --days days
   from 1,000 routers. The plain copy loses the rows older than half the window by the
   previous job's batched delete (5,000 rows a statement); the partitioned table by the
   service's own retention job (which also drops the telemetry tables' empty partitions of
   those days). Wall time and WAL bytes (pg_current_wal_lsn, after a CHECKPOINT) of each.
   (Until migration 0018 this part ran on ids_events, one row per telemetry record; its
   figures of then are in bench/README.md.)
2. Access report: the monthly report's query (server/db/reports.py) for the last full month
   over --activations activations spread over 60 days, in each layout.

Prints each figure as a ratio of the two layouts in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from server.db.connect import connect
from server.db.partitions import ensure_partitions, grid_floor
from server.db.pool import Database
from server.db.reports import ACCESS_DAYS
from server.jobs.retention import BATCH_ROWS, run_retention
from testkit.database import partitions_for_history, throwaway_database

ROUTERS = 1_000
ACTIVATION_DAYS = 60
FILL_CHUNK = 1_000_000

# The table as migration 0013 left it, for the reference runs.
PLAIN_TABLES = """
CREATE TABLE plain_activations (
    mac macaddr NOT NULL, id bigint GENERATED ALWAYS AS IDENTITY,
    activated_at timestamptz NOT NULL DEFAULT now(), address inet, PRIMARY KEY (mac, id));
CREATE INDEX ON plain_activations USING brin (activated_at);
"""

# The monthly report's statement before this change, for the reference run.
PREVIOUS_ACCESS_DAYS = """
SELECT mac::text, count(DISTINCT (activated_at AT TIME ZONE 'UTC')::date)
FROM activations WHERE activated_at >= %(start)s AND activated_at < %(end)s
GROUP BY 1 ORDER BY 1"""

# The previous retention job's statement, verbatim but for the table name.
PLAIN_DELETE = ("DELETE FROM plain_activations WHERE (mac, id) IN (SELECT mac, id "
                "FROM plain_activations WHERE activated_at < %(cutoff)s LIMIT %(batch)s)")

MAC = ("('02:00:00:00:' || lpad(to_hex((n %% {routers}) >> 8), 2, '0') || ':' || "
       "lpad(to_hex((n %% {routers}) & 255), 2, '0'))::macaddr").format(routers=ROUTERS)


def fill_activations(cur, rows: int, start: datetime, days: int) -> None:
    step = timedelta(days=days) / rows
    for first in range(0, rows, FILL_CHUNK):
        cur.execute(f"INSERT INTO activations (mac, activated_at, address) "
                    f"SELECT {MAC}, %(start)s + n * %(step)s, '203.0.113.7' "
                    f"FROM generate_series(%(first)s, %(last)s - 1) n",
                    {"start": start, "step": step, "first": first,
                     "last": min(rows, first + FILL_CHUNK)})
    cur.execute("INSERT INTO plain_activations OVERRIDING SYSTEM VALUE SELECT * FROM activations")
    cur.execute("ANALYZE activations")
    cur.execute("ANALYZE plain_activations")


def wal_position(cur) -> str:
    cur.execute("SELECT pg_current_wal_lsn()")
    return cur.fetchone()[0]


def wal_since(cur, position: str) -> int:
    cur.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (position,))
    return int(cur.fetchone()[0])


def measure_plain_delete(cur, cutoff: datetime) -> tuple[float, int, int]:
    cur.execute("CHECKPOINT")
    position, started, deleted = wal_position(cur), time.perf_counter(), 0
    while True:
        cur.execute(PLAIN_DELETE, {"cutoff": cutoff, "batch": BATCH_ROWS})
        if not cur.rowcount:
            break
        deleted += cur.rowcount
    return time.perf_counter() - started, wal_since(cur, position), deleted


def measure_partition_drop(location, cur, now: datetime, days: int) -> tuple[float, int, dict]:
    cur.execute("CHECKPOINT")
    position, started = wal_position(cur), time.perf_counter()

    async def run() -> dict:
        db = await Database.open(location, 1, 2, 60)
        try:
            return await run_retention(db, 10_000, days, now=now)
        finally:
            await db.close()

    detail = asyncio.run(run())
    return time.perf_counter() - started, wal_since(cur, position), detail


def report_seconds(cur, statement: str, table: str, start: datetime, end: datetime
                   ) -> tuple[float, int]:
    statement = statement.replace("FROM activations", f"FROM {table}")
    started = time.perf_counter()
    cur.execute(statement, {"start": start, "end": end})
    rows = len(cur.fetchall())
    return time.perf_counter() - started, rows


@dataclass
class RetentionFigures:
    rows_removed: int
    delete_seconds: float
    delete_wal: int
    drop_seconds: float
    drop_wal: int
    partitions_dropped: int
    rows_trimmed: int


def retention_figures(location, cur, rows: int, days: int) -> RetentionFigures:
    """Fill both layouts with `rows` activations over `days` days, then remove the older half
    from each: by the previous batched delete, and by the service's retention job."""
    today = grid_floor(datetime.now(timezone.utc), 1)
    started = time.perf_counter()
    fill_activations(cur, rows, today - timedelta(days=days), days)
    cur.execute("VACUUM ANALYZE activations")
    cur.execute("VACUUM ANALYZE plain_activations")
    print(f"filled {rows:,} activations over {days} days in each layout "
          f"in {time.perf_counter() - started:.0f}s", flush=True)
    # The retention job as the default schedule runs it: just after midnight UTC.
    now = today + timedelta(seconds=5)
    delete_seconds, delete_wal, deleted = measure_plain_delete(
        cur, now - timedelta(days=days // 2))
    drop_seconds, drop_wal, detail = measure_partition_drop(location, cur, now, days // 2)
    removed = detail["removed"]["activations"]
    return RetentionFigures(deleted, delete_seconds, delete_wal, drop_seconds, drop_wal,
                            len(removed["partitions_dropped"]), removed["rows_deleted"])


def retention_part(location, cur, rows: int, days: int) -> None:
    figures = retention_figures(location, cur, rows, days)
    print(f"retention of {figures.rows_removed:,} rows older than {days // 2} days:")
    print(f"  batched delete (plain table): {figures.delete_seconds:8.2f} s, "
          f"WAL {figures.delete_wal / 2**20:9.1f} MiB")
    print(f"  partition drop:               {figures.drop_seconds:8.2f} s, "
          f"WAL {figures.drop_wal / 2**20:9.3f} MiB ({figures.partitions_dropped} partitions "
          f"dropped, {figures.rows_trimmed:,} rows trimmed)")
    print(f"  partition drop vs batched delete: "
          f"{figures.delete_seconds / figures.drop_seconds:,.0f}x faster, "
          f"{figures.delete_wal / max(figures.drop_wal, 1):,.0f}x less WAL")


def report_part(location, cur, activations: int) -> None:
    today = grid_floor(datetime.now(timezone.utc), 1)
    ensure_partitions(location, 1, since=today - timedelta(days=ACTIVATION_DAYS))
    started = time.perf_counter()
    fill_activations(cur, activations, today - timedelta(days=ACTIVATION_DAYS),
                     ACTIVATION_DAYS)
    print(f"filled {activations:,} activations over {ACTIVATION_DAYS} days in each layout "
          f"in {time.perf_counter() - started:.0f}s", flush=True)
    end = today.replace(day=1)
    start = (end - timedelta(days=1)).replace(day=1)
    runs = {"before (previous query, plain table)": (PREVIOUS_ACCESS_DAYS, "plain_activations"),
            "after (its query, partitioned table)": (ACCESS_DAYS, "activations"),
            "its query on the plain table": (ACCESS_DAYS, "plain_activations")}
    timings = {}
    for _ in range(2):
        for name, (statement, table) in runs.items():
            seconds, routers = report_seconds(cur, statement, table, start, end)
            timings[name] = min(seconds, timings.get(name, seconds))
    print(f"monthly access report for {start:%Y-%m} ({routers} routers), best of 2:")
    for name, seconds in timings.items():
        print(f"  {name:38} {seconds:6.2f} s")
    before, after = list(timings.values())[:2]
    print(f"  after vs before: {before / after:.2f}x faster")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--activations", type=int, default=10_000_000)
    parser.add_argument("--days", type=int, default=30)
    args = parser.parse_args()
    with throwaway_database() as (location, _):
        partitions_for_history(location, args.days)
        conn = connect(location, autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute(PLAIN_TABLES)
                retention_part(location, cur, args.rows, args.days)
                cur.execute("TRUNCATE activations, plain_activations")
                report_part(location, cur, args.activations)
        finally:
            conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

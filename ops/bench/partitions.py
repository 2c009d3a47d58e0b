"""Time partitions at fleet scale: retention by partition drop against the batched delete of
the same rows, ingestion into the partitioned table against the plain table of migration
0013, and the monthly access report over millions of activations, before and after.

    python -m ops.bench.partitions [--rows 10000000] [--activations 10000000] [--days 30]

One database holds both layouts with the same rows: the service's partitioned tables (daily
partitions for the last --days days) and plain copies shaped as before migration 0014
(key (mac, id), the same BRIN and partial indexes).

1. Retention: ids_events and its plain copy hold --rows rows spread evenly over --days days
   from 1,000 routers. The plain copy loses the rows older than half the window by the
   previous job's batched delete (5,000 rows a statement); the partitioned table by the
   service's own retention job (which also drops cfm_records' empty partitions of those
   days). Wall time and WAL bytes (pg_current_wal_lsn, after a CHECKPOINT) of each.
2. Ingestion: the service's batched INSERT (server/db/telemetry.py) of the corpus's real
   EVE alerts, 2,000 records a statement, into each layout in alternating rounds.
3. Access report: the monthly report's query (server/db/reports.py) for the last full month
   over --activations activations spread over 60 days, in each layout.
4. Upgrade: migration 0014 on a database filled with --convert-rows events under the schema
   before it (rolled back to 0013), timed: how long an upgrade holds the tables.

Prints each figure as a ratio of the two layouts in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import orjson
import psycopg2

from server.db.partitions import ensure_partitions, grid_floor
from server.db.pool import Database
from server.db.reports import ACCESS_DAYS
from server.db.schema import ids_events
from server.db.telemetry import insert_statement
from server.ingest.extract import EVENT_COLUMNS, encode_row, event_row
from server.jobs.retention import BATCH_ROWS, run_retention
from testkit import CORPUS
from testkit.database import migrate, partitions_for_history, throwaway_database

ROUTERS = 1_000
ACTIVATION_DAYS = 60
INGEST_ROUNDS = 3
INGEST_RECORDS = 100_000
PARTITIONING = "0014.time-partitions"
INSERT_BATCH = 2_000
FILL_CHUNK = 1_000_000

# The tables as migration 0013 left them, for the reference runs.
PLAIN_TABLES = """
CREATE TABLE plain_events (
    mac macaddr NOT NULL, id bigint GENERATED ALWAYS AS IDENTITY, received_at timestamptz NOT NULL,
    event_time timestamptz, event_type text, src_ip inet, src_port integer, dest_ip inet,
    dest_port integer, proto text, app_proto text, signature_id bigint, severity smallint,
    record jsonb NOT NULL, PRIMARY KEY (mac, id));
CREATE INDEX ON plain_events USING brin (received_at);
CREATE INDEX ON plain_events (mac, received_at DESC) WHERE signature_id IS NOT NULL;
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
PLAIN_DELETE = ("DELETE FROM plain_events WHERE (mac, id) IN (SELECT mac, id FROM plain_events "
                "WHERE received_at < %(cutoff)s LIMIT %(batch)s)")

MAC = ("('02:00:00:00:' || lpad(to_hex((n %% {routers}) >> 8), 2, '0') || ':' || "
       "lpad(to_hex((n %% {routers}) & 255), 2, '0'))::macaddr").format(routers=ROUTERS)


def connect(location):
    conn = psycopg2.connect(**location.connect_kwargs())
    conn.autocommit = True
    return conn


def fill_events(cur, rows: int, start: datetime, days: int) -> None:
    """The same rows in both layouts."""
    insert_events(cur, rows, start, days)
    cur.execute("INSERT INTO plain_events OVERRIDING SYSTEM VALUE SELECT * FROM ids_events")


def insert_events(cur, rows: int, start: datetime, days: int) -> None:
    """Rows into ids_events spread evenly over [start, start + days), alerts shaped like the
    corpus's, from 1,000 routers."""
    step = timedelta(days=days) / rows
    for first in range(0, rows, FILL_CHUNK):
        last = min(rows, first + FILL_CHUNK)
        cur.execute(f"""
            INSERT INTO ids_events (mac, received_at, event_time, event_type, src_ip, src_port,
                                    dest_ip, dest_port, proto, signature_id, severity, record)
            SELECT {MAC}, %(start)s + n * %(step)s, %(start)s + n * %(step)s, 'alert',
                   ('198.51.100.' || n %% 250)::inet, 1024 + n %% 60000, '192.168.1.10', 443,
                   'TCP', 2000000 + n %% 5000, 1 + n %% 3,
                   jsonb_build_object('event_type', 'alert', 'src_ip', '198.51.100.' || n %% 250,
                       'dest_ip', '192.168.1.10', 'dest_port', 443, 'proto', 'TCP',
                       'flow_id', n, 'alert', jsonb_build_object(
                           'signature_id', 2000000 + n %% 5000, 'severity', 1 + n %% 3,
                           'signature', 'ET POLICY bench rule ' || n %% 5000,
                           'category', 'Potential Corporate Privacy Violation'))
            FROM generate_series(%(first)s, %(last)s - 1) n""",
                    {"start": start, "step": step, "first": first, "last": last})


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
            return await run_retention(db, days, 10_000, now=now)
        finally:
            await db.close()

    detail = asyncio.run(run())
    return time.perf_counter() - started, wal_since(cur, position), detail


def corpus_alert_rows(count: int) -> list[bytes]:
    alerts = []
    for path in sorted((CORPUS / "eve").glob("*.json")):
        for line in path.read_bytes().splitlines():
            if line.strip() and orjson.loads(line).get("event_type") == "alert":
                alerts.append(encode_row(line, event_row))
    if not alerts:
        raise SystemExit("no EVE alerts found under ../shared/corpus/eve")
    return [alerts[n % len(alerts)] for n in range(count)]


def ingest_rate(cur, table: str, rows: list[bytes]) -> float:
    statement = insert_statement(ids_events, EVENT_COLUMNS).replace(
        "INSERT INTO ids_events ", f"INSERT INTO {table} ", 1)
    received_at = datetime.now(timezone.utc)
    started = time.perf_counter()
    for first in range(0, len(rows), INSERT_BATCH):
        batch = b"[" + b",".join(rows[first:first + INSERT_BATCH]) + b"]"
        cur.execute(statement, {"mac": "02:00:00:00:00:01", "received_at": received_at,
                                "rows": batch.decode()})
    return len(rows) / (time.perf_counter() - started)


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
    """Fill both layouts with `rows` events over `days` days, then remove the older half from
    each: by the previous batched delete, and by the service's retention job."""
    today = grid_floor(datetime.now(timezone.utc), 1)
    started = time.perf_counter()
    fill_events(cur, rows, today - timedelta(days=days), days)
    cur.execute("VACUUM ANALYZE ids_events")
    cur.execute("VACUUM ANALYZE plain_events")
    print(f"filled {rows:,} events over {days} days in each layout "
          f"in {time.perf_counter() - started:.0f}s", flush=True)
    # The retention job as the default schedule runs it: just after midnight UTC.
    now = today + timedelta(seconds=5)
    delete_seconds, delete_wal, deleted = measure_plain_delete(
        cur, now - timedelta(days=days // 2))
    drop_seconds, drop_wal, detail = measure_partition_drop(location, cur, now, days // 2)
    removed = detail["removed"]["ids_events"]
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


def ingest_part(cur, records: int) -> None:
    rows = corpus_alert_rows(records)
    rates = {"plain_events": [], "ids_events": []}
    for _ in range(INGEST_ROUNDS):
        for table in rates:
            rates[table].append(ingest_rate(cur, table, rows))
    plain, partitioned = max(rates["plain_events"]), max(rates["ids_events"])
    print(f"ingestion of {records:,} corpus alerts, best of {INGEST_ROUNDS} alternating rounds: "
          f"partitioned {partitioned:,.0f} rows/s vs plain {plain:,.0f} rows/s: "
          f"{partitioned / plain:.2f}x")


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


def conversion_part(rows: int, days: int) -> None:
    """Migration 0014 on a database filled under the schema before it: how long the upgrade
    holds the tables."""
    with throwaway_database() as (location, _):
        migrate(location, PARTITIONING, "rollback")
        conn = connect(location)
        try:
            with conn.cursor() as cur:
                insert_events(cur, rows, datetime.now(timezone.utc) - timedelta(days=days), days)
                cur.execute("VACUUM ANALYZE ids_events")
                started = time.perf_counter()
                migrate(location, PARTITIONING)
                seconds = time.perf_counter() - started
                cur.execute("SELECT count(*) FROM ids_events_legacy")
                kept = cur.fetchone()[0]
        finally:
            conn.close()
    print(f"upgrade (migration 0014) of a database holding {rows:,} events: {seconds:.1f} s, "
          f"{kept:,} rows kept in ids_events_legacy, none copied "
          f"({seconds / rows * 1e6:.2f} s per million rows)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--activations", type=int, default=10_000_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--records", type=int, default=INGEST_RECORDS)
    parser.add_argument("--convert-rows", type=int, default=10_000_000,
                        help="events in the database that migration 0014 converts (0: skip)")
    args = parser.parse_args()
    if not (CORPUS / "eve").is_dir():
        print(f"{CORPUS / 'eve'} not found", file=sys.stderr)
        return 2
    with throwaway_database() as (location, _):
        partitions_for_history(location, args.days)
        conn = connect(location)
        try:
            with conn.cursor() as cur:
                cur.execute(PLAIN_TABLES)
                retention_part(location, cur, args.rows, args.days)
                ingest_part(cur, args.records)
                report_part(location, cur, args.activations)
        finally:
            conn.close()
    if args.convert_rows:
        conversion_part(args.convert_rows, args.days)
    return 0


if __name__ == "__main__":
    sys.exit(main())

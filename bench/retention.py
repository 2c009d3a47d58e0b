"""Retention under load: ingestion rate while the retention job deletes old rows, against the
ingestion rate alone in the same run.

    python -m bench.retention [--old 400000] [--records 100000]

Stores --old records received 60 days ago (in chunks, with their summaries), then posts
--records new records over HTTP twice: once alone (the reference) and once while the
retention job (the server's own function, RETENTION_DAYS=30) deletes the old chunks. Prints both rates, their ratio, how
long retention took, and checks that every new record is stored and every old one is gone.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from datetime import datetime, timedelta, timezone

from bench.ingest import MAC, count_rows, make_lines, ndjson_bodies, run_http, truncate
from server.db.connect import connect
from server.db.pool import Database
from server.jobs.retention import run_retention
from testkit.database import throwaway_database
from testkit.server import running_server
from testkit.telemetry import store_uploads

RETENTION_DAYS = 30


async def ingest_during_retention(location, port: int,
                                  bodies: list[bytes]) -> tuple[float, float, dict]:
    db = await Database.open(location, 1, 4, 30)
    try:
        started = time.perf_counter()
        retention = asyncio.create_task(run_retention(db, RETENTION_DAYS, RETENTION_DAYS))
        http_seconds = await run_http(port, bodies, concurrency=2)
        removed = await retention
        return http_seconds, time.perf_counter() - started, removed
    finally:
        await db.close()


def store_old(location, lines: list[bytes], received_at: datetime) -> None:
    uploads = [(MAC, received_at, lines[n:n + 2_000]) for n in range(0, len(lines), 2_000)]
    conn = connect(location)
    try:
        with conn.transaction(), conn.cursor() as cur:
            store_uploads(cur, "events", uploads, 2_000)
    finally:
        conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=int, default=400_000)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--per-request", type=int, default=2_000)
    args = parser.parse_args()

    new_lines = make_lines(args.records)
    bodies = ndjson_bodies(new_lines, args.per_request)
    old_received = datetime.now(timezone.utc) - timedelta(days=60)
    old_lines = [line for _, line in make_lines(args.old)]

    with throwaway_database() as (location, workdir), \
            running_server(location, workdir) as server:
        truncate(location)
        alone = asyncio.run(run_http(server.port, bodies, concurrency=2))
        truncate(location)
        store_old(location, old_lines, old_received)
        during, retention_seconds, detail = asyncio.run(
            ingest_during_retention(location, server.port, bodies))
        stored = count_rows(location)
    if stored != args.records:
        raise RuntimeError(f"retention removed {detail['removed']}, {stored} rows remain; "
                           f"expected {args.old} removed and {args.records} kept")
    rate_alone, rate_during = args.records / alone, args.records / during
    print(f"{args.old} old records deleted by retention in {retention_seconds:.1f}s while "
          f"{args.records} records were posted")
    print(f"ingestion alone:            {rate_alone:>10,.0f} records/s")
    print(f"ingestion during retention: {rate_during:>10,.0f} records/s")
    print(f"ratio during/alone:         {rate_during / rate_alone:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The compaction job's first run after a day closed, at the agent's cadence: each router's
day (a remainder of about 500 records a kind, merged along the day, and the last small
chunks) merged and written once, laid out by column at COMPACT_LEVEL, then the day's chunks
rewritten and its summaries packed. MERGES_AT_ONCE lanes against one lane (the reference),
each on a database of its own filled the same way, alternating, in the same run: wall
seconds a 1,000 routers, so operators can size the run after midnight.

    python -m bench.closing_run [--routers 100] [--rounds 2]

Records: the storage benchmark's stream (bench/storage.py: the corpus and variants),
1,000 a router, written through the service's writer (TelemetryWriter): per kind one upload
of all but the last 4 records (the remainder the day's merges leave at INGEST_LEVEL) and
two uploads of 2, then indexed by the hunt indexer, as the job finds a closed day.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from datetime import timedelta

from bench.storage import (AGENT_RECORDS_A_DAY, first_day_partition, record_stream,
                               write_upload)
from server.db.connect import connect
from server.db.pool import Database
from server.hunt.budget import HuntBudget
from server.hunt.indexer import index_pending
from server.hunt.postings import POSTINGS_PER_ROUTER_DAY
from server.hunt.sql import UNREAD_UPLOAD
from server.telemetry.compaction import MERGES_AT_ONCE, compact
from testkit.database import throwaway_database

LAST_UPLOADS = 2    # of 2 records a kind, after the remainder


def router_days(routers: int) -> list[tuple[str, str, list[bytes]]]:
    """Each router's day as uploads: (mac, kind, lines), the remainder first."""
    stream = record_stream(routers * AGENT_RECORDS_A_DAY)
    uploads = []
    for router in range(routers):
        mac = f"02:34:00:00:{router >> 8:02x}:{router & 255:02x}"
        day = stream[router * AGENT_RECORDS_A_DAY:(router + 1) * AGENT_RECORDS_A_DAY]
        for kind in ("events", "cfm"):
            lines = [line for record_kind, line in day if record_kind == kind]
            cut = len(lines) - 2 * LAST_UPLOADS
            uploads.append((mac, kind, lines[:cut]))
            uploads += [(mac, kind, lines[at:at + 2]) for at in range(cut, len(lines), 2)]
    return uploads


async def _closing_run(location, uploads: list, lanes: int) -> float:
    """Fill the database's first day partition with `uploads`, index them, then time the
    job's first run past that day's end with `lanes` lanes."""
    conn = connect(location, autocommit=True)
    try:
        with conn.cursor() as cur:
            day = first_day_partition(cur)
    finally:
        conn.close()
    db = await Database.open(location, 1, 8, 120)
    try:
        for n, upload in enumerate(uploads):
            await write_upload(db, day.start + timedelta(seconds=1 + n % 80_000),
                               upload)
        await index_pending(db, HuntBudget(POSTINGS_PER_ROUTER_DAY))
        started = time.perf_counter()
        await compact(db, 1_000, timedelta(0), UNREAD_UPLOAD, everything=True,
                      now=day.end + timedelta(minutes=10), lanes=lanes)
        return time.perf_counter() - started
    finally:
        await db.close()


def closing_run(uploads: list, lanes: int) -> float:
    with throwaway_database() as (location, _):
        return asyncio.run(_closing_run(location, uploads, lanes))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--routers", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    uploads = router_days(args.routers)
    lanes = MERGES_AT_ONCE
    seconds: dict[int, list[float]] = {1: [], lanes: []}
    for _ in range(args.rounds):
        for count in (1, lanes):
            seconds[count].append(closing_run(uploads, count))
            print(f"{count} lane(s): {seconds[count][-1]:.2f} s", flush=True)
    one, many = (statistics.median(seconds[count]) for count in (1, lanes))
    per_thousand = 1_000 / args.routers
    print(f"the first run after a day of {args.routers} routers ({AGENT_RECORDS_A_DAY:,} "
          f"records each): one lane {one:.2f} s, {lanes} lanes {many:.2f} s "
          f"({many / one:.2f}x; medians of {args.rounds}); a 1,000 routers: "
          f"{one * per_thousand:.1f} s and {many * per_thousand:.1f} s, so 440,000 routers "
          f"{one * per_thousand * 440 / 3600:.1f} h and {many * per_thousand * 440 / 3600:.1f} h")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A day of activations rolled up (the `activation-days` job, server/db/activation_days.py)
a range of routers a statement, against the same day in one statement (the reference, as
the job did before, the same run): the longest statement, which DB_TIMEOUT_SECONDS (30 s by
default) must outlast, and the whole roll.

    python -m bench.activation_roll [--routers 35000] [--polls 288]

--routers registered routers each polling --polls times over yesterday (288: every 5
minutes), their activations written as the service writes them (one row a poll, from one
address); then the day rolled batch by batch, the rolled rows removed, and the day rolled
by the one statement of before. Both give the same rows (checked).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from datetime import datetime, timedelta, timezone

from server.db import activation_days
from server.db.connect import connect
from server.db.pool import Database
from testkit.database import partitions_for_history, throwaway_database

ONE_STATEMENT = """
INSERT INTO activation_days (mac, day, address, activations, first_seen, last_seen)
SELECT mac, %(day)s, address, count(*), min(activated_at), max(activated_at)
FROM activations WHERE activated_at >= %(day)s AND activated_at < %(next)s
GROUP BY mac, address ON CONFLICT DO NOTHING"""
ROLLED = "SELECT count(*), sum(activations), sum(hashtext(mac::text || address::text)) " \
         "FROM activation_days"
MAC = ("('02:46:' || lpad(to_hex((r >> 24) & 255), 2, '0') || ':' || lpad(to_hex((r >> 16) "
       "& 255), 2, '0') || ':' || lpad(to_hex((r >> 8) & 255), 2, '0') || ':' || "
       "lpad(to_hex(r & 255), 2, '0'))::macaddr")


def fill(cur, day: datetime, routers: int, polls: int) -> None:
    cur.execute(f"INSERT INTO routers (mac) SELECT {MAC} FROM generate_series(0, %s - 1) r",
                (routers,))
    cur.execute(f"INSERT INTO activations (mac, activated_at, address) SELECT {MAC}, "
                "%s + p * (interval '1 day' / %s) + (r %% 60) * interval '1 second', "
                "'203.0.113.7' FROM generate_series(0, %s - 1) r, generate_series(0, %s - 1) p",
                (day, polls, routers, polls))
    cur.execute("VACUUM ANALYZE activations, routers")


async def batched(location, day: datetime) -> tuple[float, float]:
    """(whole roll, longest statement) in seconds, batch by batch as the job rolls."""
    db = await Database.open(location, 1, 2, 3600)
    longest = 0.0
    execute = db.execute

    async def timed(query, params=None):
        nonlocal longest
        started = time.perf_counter()
        try:
            return await execute(query, params)
        finally:
            longest = max(longest, time.perf_counter() - started)
    db.execute = timed  # type: ignore[method-assign]
    try:
        started = time.perf_counter()
        await activation_days.roll_day(db, day, day + timedelta(days=1))
        return time.perf_counter() - started, longest
    finally:
        await db.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--routers", type=int, default=35_000)
    parser.add_argument("--polls", type=int, default=288)
    args = parser.parse_args()
    day = (datetime.now(timezone.utc) - timedelta(days=1)).replace(
        hour=0, minute=0, second=0, microsecond=0)
    with throwaway_database() as (location, _):
        partitions_for_history(location, 3)
        conn = connect(location, autocommit=True)
        try:
            with conn.cursor() as cur:
                fill(cur, day, args.routers, args.polls)
                whole, longest = asyncio.run(batched(location, day))
                cur.execute(ROLLED)
                rows_batched = cur.fetchone()
                cur.execute("TRUNCATE activation_days")
                started = time.perf_counter()
                cur.execute(ONE_STATEMENT, {"day": day, "next": day + timedelta(days=1)})
                reference = time.perf_counter() - started
                cur.execute(ROLLED)
                assert cur.fetchone() == rows_batched, "the two rolls differ"
        finally:
            conn.close()
    activations = args.routers * args.polls
    print(f"{activations:,} activations of {args.routers:,} routers rolled up: "
          f"{activation_days.ROUTERS_A_STATEMENT:,} routers a statement {whole:.1f} s, "
          f"the longest statement {longest:.2f} s; in one statement (reference) "
          f"{reference:.1f} s: {whole / reference:.2f}x the time, the longest statement "
          f"{longest / reference:.2f}x; at this rate one statement would pass 30 s at "
          f"{30 / reference * args.routers:,.0f} routers")
    return 0


if __name__ == "__main__":
    sys.exit(main())

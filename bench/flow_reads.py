"""Generation's read of a router's flow summaries, as hourly rows and packed by day
(server/telemetry/summary_days.py), timed against the statement of before on the same rows.

    python -m bench.flow_reads [--routers 200] [--days 8] [--reads 3]

Fills `--routers` routers with `--days` days of hourly flow rows at the agent's cadence
(22 rows a router-hour: a few application protocols and many destination ports, most seen
once), the last day up to this hour. The reference: the statement generation ran before the
packing (the top protocols and ports over RULE_GENERATION_TELEMETRY_DAYS, read from the
rows), on those rows. Then the compaction job packs every closed day and drops its rows'
partitions (the day before today packed first an hour at a time, as the job packs the open
day's hours as they settle: timed apart), and the service's own statement
(TELEMETRY_SUMMARY's two flow reads, through FLOWS_IN_WINDOW) reads the same flows, rows of
today and packed days. Prints per read p50/p95 of both, their ratio, and checks both give
the same top lists. One router read at a time, as a generation worker reads it.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from datetime import datetime, timedelta, timezone

from server.db.connect import connect
from server.db.lifecycle import open_database
from server.hunt.sql import UNREAD_UPLOAD
from server.settings import load_settings
from server.telemetry.compaction import compact
from server.telemetry.sql import FLOWS_IN_WINDOW, HOURS_IN_WINDOW
from server.telemetry.summary_days import FLOWS, pack_open_hours
from testkit.database import database_env, partitions_for_history, throwaway_database

APPS = ["dns", "tls", "http", "quic", "ntp", "ssh", "smb"]
WINDOW = timedelta(days=7)
TOP = 10
_TOP_OF = """SELECT
 (SELECT array_agg(app_proto) FROM (SELECT app_proto FROM {flows} WHERE app_proto IS NOT NULL
   GROUP BY app_proto ORDER BY sum(flows) DESC, app_proto LIMIT %(top)s) apps),
 (SELECT array_agg(dest_port) FROM (SELECT dest_port FROM {flows} WHERE dest_port IS NOT NULL
   GROUP BY dest_port ORDER BY sum(flows) DESC, dest_port LIMIT %(top)s) ports)"""
# Generation's two flow reads before the packing: the hourly rows alone, read twice.
BEFORE = _TOP_OF.format(flows=f"(SELECT * FROM telemetry_flows WHERE mac = %(mac)s "
                              f"AND {HOURS_IN_WINDOW}) f")
# ... and now (server/generation/sql.py TELEMETRY_SUMMARY): rows and packed days, read once.
NOW = (f"WITH window_flows AS (SELECT * FROM {FLOWS_IN_WINDOW} f) "
       + _TOP_OF.format(flows="window_flows"))


def fill(location, macs: list[str], days: int) -> int:
    """Each router's hourly rows of `days` days up to this hour; the rows written."""
    pick = random.Random(59)
    hour = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
    rows = []
    for mac in macs:
        for back in range(days * 24):
            at = hour - timedelta(hours=back)
            for app_proto in pick.sample(APPS, 2):
                rows.append((mac, at, app_proto, None, pick.randint(1, 30)))
            for port in pick.sample(range(1, 65_536), 20):
                rows.append((mac, at, None, port, pick.choice((1, 1, 1, 2, 5))))
    with connect(location) as conn:
        with conn.cursor().copy("COPY telemetry_flows (mac, hour, app_proto, dest_port, "
                                "flows) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        conn.execute("ANALYZE telemetry_flows")
    return len(rows)


def timed_reads(location, statement: str, macs: list[str], reads: int
                ) -> tuple[list[float], dict]:
    """Each router's read `reads` times in turn: the times, and each router's answer."""
    times, answers = [], {}
    with connect(location) as conn, conn.cursor() as cur:
        for _ in range(reads):
            for mac in macs:
                started = time.perf_counter()
                cur.execute(statement, {"mac": mac, "window": WINDOW, "top": TOP})
                answers[mac] = cur.fetchone()
                times.append(time.perf_counter() - started)
    return times, answers


def describe(times: list[float]) -> str:
    cut = statistics.quantiles(times, n=20)
    return f"p50 {statistics.median(times) * 1000:.2f} ms, p95 {cut[18] * 1000:.2f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--routers", type=int, default=200)
    parser.add_argument("--days", type=int, default=8)
    parser.add_argument("--reads", type=int, default=3)
    args = parser.parse_args()
    macs = [f"02:59:00:00:{n >> 8:02x}:{n & 255:02x}" for n in range(args.routers)]
    with throwaway_database() as (location, workdir):
        partitions_for_history(location, args.days + 1)
        rows = fill(location, macs, args.days)
        before, expected = timed_reads(location, BEFORE, macs, args.reads)
        settings = load_settings({**database_env(location), "DATA_DIR": str(workdir)},
                                 env_file=None)

        yesterday = datetime.now(timezone.utc).replace(
            hour=0, minute=0, second=0, microsecond=0) - timedelta(days=1)

        async def pack() -> tuple[float, float, dict]:
            async with open_database(settings) as db:
                started = time.perf_counter()
                for hour in range(1, 24):   # yesterday as the job packed it while open
                    await pack_open_hours(db, FLOWS, yesterday + timedelta(hours=hour))
                hourly = time.perf_counter() - started
                started = time.perf_counter()
                report = await compact(db, 1_000, timedelta(0), UNREAD_UPLOAD)
                return hourly, time.perf_counter() - started, report.summary_days["flows"]
        hourly, packing, packed = asyncio.run(pack())
        with connect(location) as conn:
            conn.execute("ANALYZE telemetry_flow_days")
        now, answers = timed_reads(location, NOW, macs, args.reads)
    same = answers == expected
    print(f"{args.routers} routers x {args.days} days, {rows:,} hourly rows "
          f"({rows / args.routers / args.days:.0f} a router-day); packed "
          f"{packed['router_days']:,} router-days in {packing:.1f} s "
          f"({packing / packed['router_days'] * 1000:.2f} ms a router-day), "
          f"{len(packed['partitions_dropped'])} partitions dropped; yesterday packed an "
          f"hour at a time first: {hourly / args.routers * 1000:.2f} ms a router-day")
    print(f"rows, the statement of before (reference): {describe(before)}")
    print(f"packed days and today's rows, now:          {describe(now)}")
    print(f"ratio (now / before, medians): "
          f"{statistics.median(now) / statistics.median(before):.2f}x; "
          f"the same top protocols and ports for every router: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

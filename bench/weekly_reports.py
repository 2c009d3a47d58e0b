"""The cost of the owners' weekly reports (issue 83, server/reports/weekly.py): every owner's
report of a fleet of ROUTERS routers made in one run, from the summaries a week of uploads
leaves (hourly alert rows of the last two days, three packed days before, and seven days of
enforcement reports of three lists), with the memory
of the process sampled all along and the bytes each stored report takes.

The reference, in the same run: reading every summary row of the week once (`COPY ... TO
STDOUT` of the three tables), the least any report from the summaries can cost.

    python -m bench.weekly_reports [--routers 100000] [--hourly-rows 20] [--big-owner 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from datetime import datetime, timedelta, timezone

import psutil

from server.db.pool import Database
from server.reports.weekly import send_weekly_reports
from testkit.database import throwaway_database

_MAC = ("('02:' || lpad(to_hex((n >> 24) & 255), 2, '0') || ':' || "
        "lpad(to_hex((n >> 16) & 255), 2, '0') || ':' || lpad(to_hex((n >> 8) & 255), 2, '0')"
        " || ':' || lpad(to_hex(n & 255), 2, '0') || ':01')::macaddr")
# Two routers an owner, but for one owner of `big` routers.
_ROUTERS = f"""INSERT INTO routers (mac, owner_user, owner_email, registered_at)
SELECT {_MAC}, CASE WHEN n < %(big)s THEN 'big' ELSE 'owner-' || (n / 2) END,
       CASE WHEN n < %(big)s THEN 'big' ELSE 'owner-' || (n / 2) END || '@example.org',
       now() - interval '30 days'
FROM generate_series(0, %(routers)s - 1) n"""
_HOURLY = f"""INSERT INTO telemetry_alerts (mac, hour, src_ip, dest_ip, signature_id,
    severity, alerts, last_seen, flow_ids)
SELECT {_MAC}, date_trunc('hour', %(end)s::timestamptz) - ((r %% 48) + 1) * interval '1 hour',
       ('45.' || (n %% 200) || '.' || (r %% 250) || '.7')::inet, '192.168.1.20'::inet,
       2000000 + (n * 7 + r) %% 500, 1 + r %% 3, 1 + (n + r) %% 40, now(), '{{}}'
FROM generate_series(0, %(routers)s - 1) n, generate_series(0, %(rows)s - 1) r"""
_PACKED = f"""INSERT INTO telemetry_alert_days (mac, day, hours, src_ips, dest_ips,
    signature_ids, severities, alerts, last_seen, flow_ids, networks)
SELECT {_MAC}, date_trunc('day', %(end)s::timestamptz) - (d + 3) * interval '1 day',
       ARRAY(SELECT e::smallint FROM generate_series(0, 9) e),
       ARRAY(SELECT ('45.' || (n %% 200) || '.' || e || '.9')::inet FROM generate_series(0, 9) e),
       array_fill('192.168.1.20'::inet, ARRAY[10]),
       ARRAY(SELECT 2100000 + e::bigint FROM generate_series(0, 9) e),
       array_fill(2::smallint, ARRAY[10]), array_fill(3, ARRAY[10]),
       array_fill(now(), ARRAY[10]), array_fill('[]'::text, ARRAY[10]),
       array_fill(NULL::cidr, ARRAY[10])
FROM generate_series(0, %(routers)s - 1) n, generate_series(0, 2) d"""

# Each router's enforcement reports: the week's seven days, its three lists.
_ENFORCED = f"""INSERT INTO enforcement_days (mac, day, list, packets, bytes, alerts)
SELECT {_MAC}, (date_trunc('day', %(end)s::timestamptz, 'UTC') - d * interval '1 day')::date,
       l, 1 + (n + d) %% 50, 60 * (1 + (n + d) %% 50), 0
FROM generate_series(0, %(routers)s - 1) n, generate_series(1, 7) d,
     unnest(ARRAY['firewall', 'fleet', 'intel']) l"""


async def _plant(db: Database, routers: int, rows: int, big: int, end: datetime) -> float:
    began = time.perf_counter()
    names = {"routers": routers, "rows": rows, "big": big, "end": end}
    for statement in (_ROUTERS, _HOURLY, _PACKED, _ENFORCED):
        await db.execute(statement, names)
    await db.execute("ANALYZE")
    return time.perf_counter() - began


async def _reference(db: Database) -> float:
    """Every summary row read once, as COPY writes it out."""
    began = time.perf_counter()
    async with db.cursor() as cur:
        for table in ("telemetry_alerts", "telemetry_alert_days", "enforcement_days"):
            async with cur.copy(f"COPY (SELECT * FROM {table}) TO STDOUT") as copy:
                async for _ in copy:
                    pass
    return time.perf_counter() - began


async def _sampled(rss: list[int]) -> None:
    process = psutil.Process(os.getpid())
    while True:
        rss.append(process.memory_info().rss)
        await asyncio.sleep(0.2)


async def _run(location, routers: int, rows: int, big: int) -> None:
    db = await Database.open(location, 0, 4, 600)
    try:
        end = (datetime.now(timezone.utc) + timedelta(hours=1)).replace(
            minute=0, second=0, microsecond=0)
        planted = await _plant(db, routers, rows, big, end)
        summary_rows = await db.fetchrow("SELECT (SELECT count(*) FROM telemetry_alerts), "
                                         "(SELECT count(*) FROM telemetry_alert_days)")
        reference = await _reference(db)
        rss: list[int] = []
        sampler = asyncio.get_running_loop().create_task(_sampled(rss))
        began = time.perf_counter()
        done = await send_weekly_reports(db, week_end=end)
        took = time.perf_counter() - began
        sampler.cancel()
        size, biggest = await db.fetchrow(
            "SELECT pg_total_relation_size('notifications'), max(length(message)) "
            "FROM notifications")
    finally:
        await db.close()
    print(f"planted {routers:,} routers ({done['owners']:,} owners, one of {big:,} routers), "
          f"{summary_rows[0]:,} hourly alert rows and {summary_rows[1]:,} packed days in "
          f"{planted:.0f} s")
    print(f"reference: every summary row read once (COPY TO STDOUT) in {reference:.1f} s")
    print(f"weekly reports: {done['reports']:,} made for {done['routers']:,} routers in "
          f"{took:.1f} s: {took / reference:.2f}× the reference; "
          f"{took / done['routers'] * 1e6:.0f} µs a router")
    print(f"memory of this process during the run: {min(rss) / 2**20:.0f} MiB at the least, "
          f"{max(rss) / 2**20:.0f} MiB at the most ({len(rss)} samples)")
    print(f"stored: {size / done['reports']:.0f} bytes a report (notifications table), the "
          f"longest message {biggest:,} characters")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routers", type=int, default=100_000)
    parser.add_argument("--hourly-rows", type=int, default=20,
                        help="hourly alert rows a router in the last two days")
    parser.add_argument("--big-owner", type=int, default=10_000,
                        help="routers of the one owner of many")
    args = parser.parse_args()
    with throwaway_database() as (location, _):
        asyncio.run(_run(location, args.routers, args.hourly_rows, args.big_owner))


if __name__ == "__main__":
    main()

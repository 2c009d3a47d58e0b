"""The hunt index at fleet scale (issue 52): a synthetic fleet's postings built at several
sizes, hunts timed for a rare value, a medium one and one every router sees, the index's
bytes per posting and per router-day, and its build time per million records.

    python -m ops.bench.hunt [--routers 1000,3000,10000] [--days 30] [--scale 1]

Per router and day the fleet carries what the corpus's sensor capture (a router's day of
EVE: tests/corpus/eve/lab-sensor-eve.json) carries, times --scale: 29 addresses, 31 domain
postings (its 14 names and their parents: server/telemetry/indicators.py), 8 signatures,
plus 5 JA3, 5 JA4 and 1 file hash (the corpus has no TLS or file records), each drawn from
a pool of 100,000 values per kind with a heavy head (index = 100,000 × u³: a few values
every router sees, most values at a few routers), 8 records each. Postings are written by one INSERT ... SELECT per day, as the index's primary key
orders them; the reference is a COPY of the same rows into a table without index, in the
same run. Hunts are the service's own statement (server/db/hunt.py), 20 values each of
three popularities: rare (seen by 1-10 routers), medium (about 1 % of routers), every router
(the most popular value of its kind).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from datetime import datetime, timedelta, timezone

from server.db.connect import connect
from server.db.pool import Database
from server.hunt.search import Hunt, run_hunt
from server.telemetry.indicators import KINDS, Indicator
from testkit.database import partitions_for_history, throwaway_database

POOL = 100_000
PER_ROUTER_DAY = {"i": 29, "d": 31, "s": 8, "3": 5, "4": 5, "h": 1}  # the corpus's sensor day
RECORDS_PER_POSTING = 8

FILL_DAY = """
INSERT INTO hunt_postings (day, kind, value, mac, first_seen, last_seen, records)
SELECT %(day)s, k.kind, k.kind::text || '-' || floor(%(pool)s * random() ^ 3)::int, r.mac,
       %(day)s + interval '1 hour', %(day)s + interval '20 hours', %(records)s
FROM (SELECT ('02:52:' || lpad(to_hex(n >> 24), 2, '0') || ':' || lpad(to_hex((n >> 16) & 255), 2, '0')
              || ':' || lpad(to_hex((n >> 8) & 255), 2, '0') || ':' || lpad(to_hex(n & 255), 2, '0'))::macaddr
              AS mac FROM generate_series(1, %(routers)s) AS n) r
CROSS JOIN unnest(%(kinds)s::"char"[], %(counts)s::int[]) AS k(kind, count)
CROSS JOIN LATERAL generate_series(1, k.count * %(scale)s) AS g
ON CONFLICT DO NOTHING"""


def build(conn, routers: int, days: int, scale: int) -> tuple[float, int]:
    started = time.monotonic()
    today = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    with conn.cursor() as cur:
        cur.execute("SELECT setseed(0.52)")
        for back in range(days):
            cur.execute(FILL_DAY, {"day": today - timedelta(days=back), "pool": POOL,
                                   "records": RECORDS_PER_POSTING, "routers": routers,
                                   "kinds": list(PER_ROUTER_DAY),
                                   "counts": list(PER_ROUTER_DAY.values()), "scale": scale})
            conn.commit()
        cur.execute("ANALYZE hunt_postings")
        cur.execute("SELECT count(*) FROM hunt_postings")
        postings = cur.fetchone()[0]
    conn.commit()
    return time.monotonic() - started, postings


def reference_copy(conn) -> float:
    """The same rows COPY'd out and into a table without index: the reference."""
    with conn.cursor() as cur:
        cur.execute("CREATE TEMPORARY TABLE copied (LIKE hunt_postings)")
        with cur.copy("COPY (SELECT * FROM hunt_postings) TO STDOUT") as copy:
            data = b"".join(copy)
        started = time.monotonic()
        with cur.copy("COPY copied FROM STDIN") as copy:
            copy.write(data)
        took = time.monotonic() - started
        cur.execute("DROP TABLE copied")
    conn.commit()
    return took


def values_by_popularity(conn, routers: int) -> dict[str, list[tuple[str, str]]]:
    with conn.cursor() as cur:
        cur.execute("""SELECT kind, value, count(DISTINCT mac) FROM hunt_postings
                       WHERE day = (SELECT max(day) FROM hunt_postings) GROUP BY kind, value""")
        seen = cur.fetchall()
    rare = [(k, v) for k, v, n in seen if 1 <= n <= 10]
    medium = sorted(seen, key=lambda row: abs(row[2] - routers / 100))
    everyone = sorted(seen, key=lambda row: -row[2])
    return {"rare (1-10 routers)": rare[:20],
            "medium (~1 % of routers)": [(k, v) for k, v, _ in medium[:20]],
            "every router": [(k, v) for k, v, _ in everyone[:6]] * 4}


async def latency(location, values: list[tuple[str, str]],
                  days: int) -> tuple[float, float, int, bool]:
    """Each value hunted as the service does (server/hunt/search.py, recorded too)."""
    db = await Database.open(location, 1, 1, 60)
    times, found, exact = [], 0, True
    try:
        for code, value in values:
            hunt = Hunt((Indicator(KINDS[code], value, value),), days)  # synthetic values
            started = time.monotonic()
            answer = await run_hunt(db, hunt, "bench", "command", days)
            times.append(time.monotonic() - started)
            found = max(found, answer["match_count"])
            exact = exact and answer["match_count_exact"]
    finally:
        await db.close()
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.95) - 1], found, exact


def size_of(conn) -> int:
    with conn.cursor() as cur:
        cur.execute("SELECT sum(pg_total_relation_size(inhrelid)) FROM pg_inherits "
                    "WHERE inhparent = 'hunt_postings'::regclass")
        return int(cur.fetchone()[0] or 0)


def one_size(routers: int, days: int, scale: int) -> dict:
    with throwaway_database() as (location, _):
        partitions_for_history(location, days)  # a partition a day, as the service keeps
        conn = connect(location)
        try:
            build_seconds, postings = build(conn, routers, days, scale)
            reference = reference_copy(conn)
            size = size_of(conn)
            result = {"routers": routers, "days": days, "postings": postings,
                      "bytes_per_posting": size / postings,
                      "bytes_per_router_day": size / (routers * days),
                      "build_seconds": build_seconds, "copy_seconds": reference,
                      "records": postings * RECORDS_PER_POSTING, "latency": {}}
            for label, values in values_by_popularity(conn, routers).items():
                result["latency"][label] = asyncio.run(latency(location, values, days))
            return result
        finally:
            conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--routers", default="1000,3000,10000")
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--scale", type=int, default=1)
    args = parser.parse_args()
    results = []
    for routers in (int(n) for n in args.routers.split(",")):
        r = one_size(routers, args.days, args.scale)
        results.append(r)
        print(f"{r['routers']:,} routers × {r['days']} days: {r['postings']:,} postings "
              f"({r['records']:,} records at {RECORDS_PER_POSTING} a posting); "
              f"{r['bytes_per_posting']:.0f} bytes a posting, "
              f"{r['bytes_per_router_day'] / 1024:.1f} KiB a router-day with indexes; built "
              f"in {r['build_seconds']:.0f} s ({r['build_seconds'] / r['records'] * 1e6:.1f} s "
              f"per million records; {r['build_seconds'] / r['copy_seconds']:.1f}x a COPY of "
              f"the same rows into a table without index, {r['copy_seconds']:.1f} s)")
        for label, (p50, p95, found, exact) in r["latency"].items():
            print(f"    hunt, {label}: p50 {p50 * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms "
                  f"(up to {'' if exact else 'at least '}{found:,} router-indicator "
                  f"matches)")
        sys.stdout.flush()
    if len(results) > 1:
        first, last = results[0], results[-1]
        growth = last["routers"] / first["routers"]
        for label in first["latency"]:
            ratio = last["latency"][label][1] / first["latency"][label][1]
            print(f"p95 of '{label}' grew {ratio:.1f}x for {growth:.0f}x the routers")
        per_day = last["bytes_per_router_day"]
        for fleet, days in ((240_000, 30), (1_000_000, 400)):
            print(f"{fleet:,} routers × {days} days: {per_day * fleet * days / 1e12:.2f} TB "
                  f"of index at {per_day / 1024:.1f} KiB a router-day")
    return 0


if __name__ == "__main__":
    sys.exit(main())

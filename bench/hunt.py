"""The hunt index at fleet scale (issues 52, 59): a synthetic fleet's postings written through
the service's own statement, packed by the service's own job, then measured: bytes a
posting and a router-day (everything counted: heap, indexes, TOAST, after VACUUM), build and
packing time per million records, and hunts timed for a rare value, a value at about 1 % of
the routers and one every router sees, over 30 days and over the whole window.

    python -m bench.hunt [--routers 1000,10000] [--days 30] [--distinct-days 7] [--citus]

Per router and day: what the corpus's sensor capture (a router's day of EVE:
tests/corpus/eve/lab-sensor-eve.json) carries: 29 addresses, 31 domain postings (its 14
names and their parents), 8 signatures, plus 5 JA3, 5 JA4 and 1 file hash, each drawn from
a pool of 100,000 values per kind with a heavy head (index = 100,000 × u³: a few values
every router sees, most at a few routers), 8 records each. A router-day is three uploads at
random times (the first carries every value, the others a random half each), each written
as the service writes an upload's postings (server/hunt/sql.py postings_statement): a
value's first and last time differ as an agent's do.

--distinct-days of them are written and packed (server/hunt/packing.py pack);
the other days of --days get copies of those days' blocks (the same bytes under another
date), which keeps a 400-day build within a session on this 2-core machine. Sizes and hunt
times are those of the whole window; build and packing times are per written day.

The reference, in the same run: the written days' rows COPY'd into a table without index.
With --citus, each size is built and hunted twice: on one plain PostgreSQL, then on a Citus
coordinator with two workers, both of the installation pg_config names, started for it
(testkit/citus_cluster.py; the tables distributed as the service distributes them).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from datetime import datetime, timedelta, timezone

import numpy as np

from server.db.connect import connect
from server.hunt.sql import postings_statement
from server.db.pool import Database, execute
from server.hunt.search import Hunt, run_hunt
from server.hunt.packing import pack
from server.telemetry.indicators import KINDS, Indicator
from server.hunt.postings import POSTINGS_PER_ROUTER_DAY
from testkit.citus_cluster import citus_installed, cluster_database
from testkit.database import partitions_for_history, throwaway_database

POOL = 100_000
PER_ROUTER_DAY = {"i": 29, "d": 31, "s": 8, "3": 5, "4": 5, "h": 1}  # the corpus's sensor day
RECORDS_PER_POSTING = 8
UPLOADS_A_DAY = 3
ROUTERS_A_TRIP = 25  # routers' uploads sent in one text (each its own statement)
RARE_HUNTS = 100  # rare values hunted: a p95 of 20 would be the second slowest alone


def _value(code: str, index: int) -> str:
    if code == "i":
        return f"198.{index >> 16 & 255}.{index >> 8 & 255}.{index & 255}"
    if code == "d":
        return f"com.example{index % 997}.n{index}"
    if code == "s":
        return str(2_000_000 + index)
    if code == "h":
        return f"{index:064x}"
    return f"{code}{index:031x}"


def _macs(routers: int) -> list[str]:
    return [f"02:52:{n >> 24 & 255:02x}:{n >> 16 & 255:02x}:{n >> 8 & 255:02x}:{n & 255:02x}"
            for n in range(1, routers + 1)]


def _router_day(rng: np.random.Generator) -> list[tuple[str, str]]:
    values = []
    for code, count in PER_ROUTER_DAY.items():
        for index in set((POOL * rng.random(count) ** 3).astype(int).tolist()):
            values.append((code, _value(code, index)))
    return values


async def write_day(db: Database, macs: list[str], day: datetime,
                    rng: np.random.Generator) -> int:
    """Every router's uploads of one day, through the service's statement; rows written."""
    written, batch = 0, []
    for mac in macs:
        values = _router_day(rng)
        times = sorted(rng.integers(0, 86_400, UPLOADS_A_DAY).tolist())
        for upload, second in enumerate(times):
            chosen = values if upload == 0 else [v for v in values if rng.random() < 0.5]
            rows = [{"code": c, "value": v, "records": RECORDS_PER_POSTING // UPLOADS_A_DAY + 1}
                    for c, v in sorted(chosen)]
            batch.append(postings_statement({
                "mac": mac, "day": day, "seen": day + timedelta(seconds=second), "rows": rows,
                "records": len(rows) * RECORDS_PER_POSTING // UPLOADS_A_DAY,
                "budget": POSTINGS_PER_ROUTER_DAY}))
            written += len(rows)
        if len(batch) >= ROUTERS_A_TRIP * UPLOADS_A_DAY or mac == macs[-1]:
            async with db.transaction() as cur:  # one commit a batch, not an fsync each
                for statement in batch:
                    await execute(cur, statement)
            batch = []
    return written


def reference_copy(location) -> float:
    """The rows still in `hunt_postings` COPY'd out and into a table without index."""
    conn = connect(location)
    try:
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
    finally:
        conn.close()


COPY_DAYS = """INSERT INTO hunt_packed (day, bucket, pass, postings, block)
SELECT %(to)s, bucket, pass, postings, block FROM hunt_packed WHERE day = %(from)s;
INSERT INTO hunt_packed_days (day, bits, postings, bytes)
SELECT %(to)s, bits, postings, bytes FROM hunt_packed_days WHERE day = %(from)s"""
SIZES = """SELECT (SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c
                   WHERE c.relname IN ('hunt_packed', 'hunt_packed_days', 'hunt_routers',
                                       'hunt_removed_routers') AND c.relkind = 'r'),
       (SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0) FROM pg_inherits
        WHERE inhparent = 'hunt_postings'::regclass),
       (SELECT sum(postings) FROM hunt_packed_days)"""


def popular_values(routers: int) -> dict[str, list[tuple[str, str]]]:
    """Values by how many routers a day see them, from the draw's own law: index i of a
    kind is seen by a router with probability about 1 - (1 - p_i)^count."""
    shares = {}
    for code, count in PER_ROUTER_DAY.items():
        edges = np.arange(POOL + 1) / POOL
        p = np.diff(edges ** (1 / 3))  # P(index = i) for index = floor(POOL u^3)
        shares[code] = routers * (1 - (1 - p) ** count)
    rare, medium, everyone = [], [], []
    for code, seen in shares.items():
        few = np.nonzero((seen >= 1) & (seen <= 10))[0]
        picked = few[np.linspace(0, len(few) - 1, min(len(few), RARE_HUNTS // 3)).astype(int)]
        rare += [(code, _value(code, int(i))) for i in picked]
        medium.append((code, _value(code, int(np.argmin(abs(seen - routers / 100))))))
        everyone.append((code, _value(code, 0)))
    return {"rare (1-10 routers)": rare[:RARE_HUNTS], "about 1 % of routers": medium * 3,
            "every router": everyone * 4}


async def latency(db: Database, values: list[tuple[str, str]],
                  days: int) -> tuple[float, float, float, int, bool]:
    """Each value hunted as the service does (server/hunt/search.py, recorded too): p50,
    p95, the first hunt's time (its blocks the least likely cached), the most matches and
    whether every count was exact."""
    times, found, exact = [], 0, True
    for code, value in values:
        hunt = Hunt((Indicator(KINDS[code], value, value),), days)  # synthetic values
        started = time.monotonic()
        answer = await run_hunt(db, hunt, "bench", "command", days)
        times.append(time.monotonic() - started)
        found = max(found, answer["match_count"])
        exact = exact and answer["match_count_exact"]
    first, times = times[0], sorted(times)
    return (statistics.median(times), times[max(0, int(len(times) * 0.95) - 1)], first, found,
            exact)


async def one_size(location, routers: int, days: int, distinct: int) -> dict:
    db = await Database.open(location, 1, 2, 600)
    rng = np.random.default_rng(59)
    today = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    macs = _macs(routers)
    written = write_seconds = pack_seconds = copy_seconds = 0.0
    try:  # registered, as their first contact registers them (only theirs are packed)
        await db.execute("INSERT INTO routers (mac) SELECT unnest(%(macs)s::macaddr[])",
                         {"macs": macs})
        for back in range(1, distinct + 1):
            started = time.monotonic()
            written += await write_day(db, macs, today - timedelta(days=back), rng)
            write_seconds += time.monotonic() - started
            copy_seconds += await asyncio.to_thread(reference_copy, location)
            started = time.monotonic()
            await pack(db, today)
            pack_seconds += time.monotonic() - started
        for back in range(distinct + 1, days + 1):
            source = today - timedelta(days=1 + (back - 1) % distinct)
            await db.execute(COPY_DAYS, {"to": today - timedelta(days=back), "from": source})
        conn = connect(location, autocommit=True)
        try:
            conn.execute("VACUUM ANALYZE")
            packed, rows, postings = conn.execute(SIZES).fetchone()
        finally:
            conn.close()
        result = {"routers": routers, "days": days, "distinct_days": distinct,
                  "postings": int(postings), "bytes": int(packed) + int(rows),
                  "rows_written": int(written),
                  "records_written": int(written // UPLOADS_A_DAY * RECORDS_PER_POSTING),
                  "write_seconds": write_seconds, "pack_seconds": pack_seconds,
                  "copy_seconds": copy_seconds, "latency": {}}
        result["bytes_per_posting"] = result["bytes"] / result["postings"]
        result["bytes_per_router_day"] = result["bytes"] / (routers * days)
        for window in sorted({30, days}):
            for label, values in popular_values(routers).items():
                result["latency"][f"{label}, {len(values)} hunts, {window} days"] = \
                    await latency(db, values, window)
        return result
    finally:
        await db.close()


def report(r: dict) -> None:
    per_million = 1e6 / r["records_written"]
    print(f"{r['routers']:,} routers × {r['days']} days ({r['distinct_days']} written, the rest "
          f"copies of their blocks): {r['postings']:,} postings in {r['bytes'] / 1e6:.1f} MB: "
          f"{r['bytes_per_posting']:.2f} bytes a posting, {r['bytes_per_router_day']:.0f} bytes "
          f"a router-day, everything counted")
    print(f"    written: {r['rows_written']:,} posting rows ({r['records_written']:,} records) "
          f"in {r['write_seconds']:.0f} s, {r['write_seconds'] * per_million:.1f} s per million "
          f"records ({r['write_seconds'] / r['copy_seconds']:.1f}x a COPY of the same rows "
          f"into a table without index); packed in {r['pack_seconds']:.0f} s, "
          f"{r['pack_seconds'] * per_million:.1f} s per million records")
    for label, (p50, p95, first, found, exact) in r["latency"].items():
        print(f"    hunt, {label}: p50 {p50 * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms, the "
              f"first {first * 1000:.1f} ms (up to {'' if exact else 'at least '}{found:,} "
              "matches)")
    sys.stdout.flush()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--routers", default="1000,10000")
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--distinct-days", type=int, default=7)
    parser.add_argument("--citus", action="store_true",
                        help="each size on one plain PostgreSQL, then on a Citus coordinator "
                             "with two workers, both of this installation, started for it")
    args = parser.parse_args()
    if args.citus and not citus_installed():
        print("the citus extension is not installed (docs/scaling.md)", file=sys.stderr)
        return 1
    setups = [("one PostgreSQL", lambda: cluster_database(citus=False)),
              ("Citus, a coordinator and 2 workers", cluster_database)] if args.citus else \
        [("", throwaway_database)]
    for routers in (int(n) for n in args.routers.split(",")):
        for name, database in setups:
            with database() as (location, _):
                partitions_for_history(location, args.days + 1)
                result = asyncio.run(one_size(location, routers, args.days,
                                              min(args.distinct_days, args.days)))
            print(name)
            report(result)
            per_day = result["bytes_per_router_day"]
            print(f"    at {per_day:.0f} bytes a router-day: 1 TB holds "
                  f"{1e12 / (per_day * 400):,.0f} router-years of 400 days of index")
    return 0


if __name__ == "__main__":
    sys.exit(main())

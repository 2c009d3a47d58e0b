"""Citus benchmark: ingestion, generation and the fleet-wide reads on a Citus coordinator with
two workers against one PostgreSQL of the same installation and settings, on this machine.

    python -m bench.citus [--records 100000] [--per-request 1000] [--concurrency 8]
                              [--routers 200] [--workers 2] [--activations 720]

Needs the citus extension installed for the PostgreSQL that pg_config names
(testkit/citus_cluster.py starts both set-ups). For each: the real server posts --records
alert records as --concurrency routers (one body at a time each); --routers routers are
generated through the pool of --workers processes, as the queue does (bench/generation.py);
then, with --activations per router over 30 days, the database's part of the fleet status
(`router-backend status`) and the month's access report (`routeraccessreport`) are read,
both over every shard, best of 5 each, and the retention job removes the older half of the
activations (once). Prints each figure and
the ratio cluster/single.

On one machine the three nodes share its cores and its disk, so this measures the price of
the coordinator's hop (each statement planned on the coordinator, then run on a worker over
a second connection; two-phase commit where a transaction writes the coordinator's tables
and a worker's), not the gain of more machines: docs/performance.md gives the arithmetic
per node.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from bench.generation import (DEFAULT_ARCHIVE, fill_telemetry, published_ruleset,
                                  reset_queue, router_macs, run_round)
from bench.ingest import check_stored, make_lines, ndjson_bodies, run_http
from server.db.lifecycle import open_database
from server.db.reports import daily_activity
from server.status import fleet_status
from server.jobs.retention import run_retention
from testkit.citus_cluster import citus_installed, cluster_database
from testkit.database import Sql
from testkit.server import running_server

SETUPS = {"one PostgreSQL": False, "Citus, coordinator + 2 workers": True}


def measure(citus: bool, args: argparse.Namespace, bodies: list[bytes]) -> dict[str, float]:
    with cluster_database(citus) as (location, workdir):
        with running_server(location, workdir,
                            INGEST_MAX_UPLOADS_PER_ADDRESS="1000") as server:
            seconds = asyncio.run(run_http(server.port, bodies, args.concurrency))
        check_stored(location, {"events": args.records})
        settings, ruleset = published_ruleset(location, workdir, args.archive)
        macs = router_macs(args.routers)
        fill_telemetry(location, macs, [rule["sid"] for rule in ruleset.rules])
        reset_queue(location)
        generation_seconds, latencies = asyncio.run(run_round(settings, macs, args.workers))
        add_activations(location, macs, args.activations)
        status_seconds, report_seconds = asyncio.run(fleet_reads(settings))
        retention_seconds = asyncio.run(retention_run(settings))
    return {"records/s": args.records / seconds,
            "routers generated/s": len(latencies) / generation_seconds,
            "fleet status, ms": status_seconds * 1000,
            "month's report, ms": report_seconds * 1000,
            "retention, ms": retention_seconds * 1000}


def add_activations(location, macs: list[str], per_router: int) -> None:
    """`per_router` activations for each router, spread over the last 30 days, and the
    statistics autovacuum would gather after such a load."""
    sql = Sql(location)
    sql.rows("INSERT INTO activations (mac, activated_at, address) "
             "SELECT m::macaddr, now() - n * (interval '30 days' / %(n)s), '192.0.2.1' "
             "FROM unnest(%(macs)s::text[]) m, generate_series(1, %(n)s) n",
             {"macs": macs, "n": per_router})
    sql.rows("ANALYZE")


async def fleet_reads(settings) -> tuple[float, float]:
    """The best of 5 of the fleet status and of the last 30 days' access report."""
    async def report(db) -> None:
        now = datetime.now(timezone.utc)
        async for _ in daily_activity(db, now - timedelta(days=30), now):
            pass
    async with open_database(settings) as db:
        return (await best_of(5, lambda: fleet_status(db, settings)),
                await best_of(5, lambda: report(db)))


async def retention_run(settings) -> float:
    """The retention job keeping 15 days of activations: the older half of the month's goes,
    trimmed from the partition that holds them in batches by key."""
    async with open_database(settings) as db:
        return await best_of(1, lambda: run_retention(db, days=30, activation_days=15))


async def best_of(runs: int, read) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        await read()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--per-request", type=int, default=1_000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--routers", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--activations", type=int, default=720,
                        help="activations per router over 30 days (the report's input)")
    parser.add_argument("--archive", type=Path, default=DEFAULT_ARCHIVE)
    args = parser.parse_args()
    if not citus_installed():
        print("the citus extension is not installed for the PostgreSQL pg_config names "
              "(docs/scaling.md)", file=sys.stderr)
        return 2
    bodies = ndjson_bodies(make_lines(args.records), args.per_request)
    print(f"{args.records} records in bodies of {args.per_request} from {args.concurrency} "
          f"routers; {args.routers} routers generated by {args.workers} workers")
    figures = {label: measure(citus, args, bodies) for label, citus in SETUPS.items()}
    single, cluster = figures.values()
    for name in single:
        print(f"{name:>22}: " + ", ".join(f"{label} {values[name]:,.1f}"
                                          for label, values in figures.items())
              + f"; cluster/single {cluster[name] / single[name]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

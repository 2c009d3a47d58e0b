"""The fleet job at fleet scale: the hourly alert summaries of --routers routers over the
job's window (synthetic, with the shapes of the real thing), counted by the real job.

    python -m bench.fleet_job [--routers 240000] [--hours 24] [--citus]

The fleet, written by one INSERT ... SELECT in the database:
- routers registered a month ago, each polling from an address of its own /24, but one in
  eight behind a shared carrier-grade NAT address (2,000 of them);
- in each hour a router alerts with probability --active (0.3): 1 to 5 summary rows, each
  from a scanner drawn from 100,000 with a heavy head (index = 100,000 × u⁴: the busiest
  scanners reach most routers, most scanners a few, as internet-wide scanning does), one of
  60 signatures (a head too), severity 1 (10 %), 2 (45 %) or 3 (45 %), 1 to 20 alerts.

Then the job runs (three times, best taken) and the benchmark prints its time, the share of
its 5-minute period, the memory it took (the job's process; PostgreSQL's temporary files),
and, as the same-run reference, the time to read the window's summary rows once (a COPY of
them to the client, discarded): the job against one pass over its input. With --citus, the
same on a Citus coordinator with two workers (testkit/citus_cluster.py), the tables
distributed: the cost of the aggregation across shards.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from server.db.connect import connect
from server.db.location import DatabaseLocation
from server.db.pool import Database
from server.fleet.config import FleetConfig
from server.fleet.job import run_fleet
from server.settings import load_settings
from testkit.citus_cluster import citus_installed, cluster_database
from testkit.database import Sql, database_env, throwaway_database

PERIOD_SECONDS = 300
SCANNERS = 100_000
SIGNATURES = 60

FILL = """
SELECT setseed(0.46);  -- the same fleet in every run
INSERT INTO routers (mac, registered_at, poll_address)
SELECT ('02:00:' || lpad(to_hex(n >> 24), 2, '0') || ':' || lpad(to_hex((n >> 16) & 255), 2, '0')
        || ':' || lpad(to_hex((n >> 8) & 255), 2, '0') || ':' || lpad(to_hex(n & 255), 2, '0')
       )::macaddr,
       now() - interval '30 days',
       CASE WHEN n %% 8 = 0 THEN '100.64.0.0'::inet + (n %% 2000)  -- a shared NAT address
            ELSE '11.0.0.0'::inet + n * 256 + 7 END                -- a /24 of its own
FROM generate_series(1, %(routers)s) AS n;

INSERT INTO telemetry_alerts (mac, hour, src_ip, dest_ip, signature_id, severity, alerts,
                              last_seen, flow_ids, network)
SELECT r.mac, h.hour,
       '45.0.0.0'::inet + (floor(%(scanners)s * random() ^ 4))::int * 7,
       '192.168.1.2'::inet,
       2010000 + floor(%(signatures)s * random() ^ 2)::int,
       CASE WHEN random() < 0.1 THEN 1 WHEN random() < 0.5 THEN 2 ELSE 3 END,
       1 + floor(random() * 20)::int, h.hour + interval '30 minutes', ARRAY['1'],
       network(set_masklen(r.poll_address, 24))  -- its uploads come from where it polls
FROM routers r
CROSS JOIN (SELECT date_trunc('hour', now()) - k * interval '1 hour' AS hour
            FROM generate_series(0, %(hours)s - 1) AS k) h
-- correlated (h.hour named), so that the count is drawn for each router and hour
CROSS JOIN LATERAL generate_series(1, CASE WHEN random() < %(active)s AND h.hour IS NOT NULL
                                       THEN 1 + floor(random() * 5)::int ELSE 0 END) AS row
ON CONFLICT DO NOTHING;
ANALYZE routers; ANALYZE telemetry_alerts;
"""

# One hostile router (aged like the rest, on a /24 of its own) reporting --hostile-sources
# distinct public sources in the last hour, one summary row each.
HOSTILE = """
INSERT INTO routers (mac, registered_at, poll_address)
VALUES ('02:ff:ff:ff:ff:ff', now() - interval '30 days', '12.0.0.7');
INSERT INTO telemetry_alerts (mac, hour, src_ip, dest_ip, signature_id, severity, alerts,
                              last_seen, flow_ids, network)
SELECT '02:ff:ff:ff:ff:ff', date_trunc('hour', now()), '46.0.0.0'::inet + n * 3,
       '192.168.1.2', 2010000 + n %% 1000, 1, 1, now(), ARRAY['1'], '12.0.0.0/24'
FROM generate_series(1, %(sources)s) AS n;
ANALYZE telemetry_alerts;
"""

WINDOW_ROWS = ("SELECT * FROM telemetry_alerts WHERE hour > now() - %s * interval '1 hour' "
               "- interval '1 hour'")


def fill(location: DatabaseLocation, args: argparse.Namespace) -> tuple[int, float]:
    started = time.monotonic()
    Sql(location).rows(FILL, {"routers": args.routers, "hours": args.hours,
                              "active": args.active, "scanners": SCANNERS,
                              "signatures": SIGNATURES})
    rows = Sql(location).value("SELECT count(*) FROM telemetry_alerts")
    return rows, time.monotonic() - started


def read_once(location: DatabaseLocation, hours: int) -> float:
    """The reference: the window's rows copied to the client once."""
    conn = connect(location)
    try:
        started = time.monotonic()
        with conn.cursor() as cur, cur.copy(f"COPY ({WINDOW_ROWS % hours}) TO STDOUT") as copy:
            for _ in copy:  # discarded
                pass
        return time.monotonic() - started
    finally:
        conn.close()


def temp_bytes(location: DatabaseLocation) -> int:
    return int(Sql(location).value("SELECT sum(temp_bytes) FROM pg_stat_database"))


async def run_job(location: DatabaseLocation, workdir: Path, hours: int) -> tuple[float, dict]:
    settings = load_settings({**database_env(location), "DATA_DIR": str(workdir),
                              "FLEET_WINDOW_HOURS": str(hours),
                              "FLEET_ATTACKERS_IN_MAC_MODE": "true"}, env_file=None)
    db = await Database.open(location, 1, 2, 600)
    try:
        started = time.monotonic()
        detail = await run_fleet(db, FleetConfig.from_settings(settings))
        return time.monotonic() - started, detail
    finally:
        await db.close()


@contextmanager
def database(citus: bool):
    if not citus:
        with throwaway_database() as found:
            yield found
        return
    with cluster_database() as found:
        yield found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--routers", type=int, default=240_000)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--active", type=float, default=0.3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--citus", action="store_true")
    parser.add_argument("--hostile-sources", type=int, default=0,
                        help="then again with one router reporting this many distinct sources")
    args = parser.parse_args()
    if args.citus and not citus_installed():
        print("the citus extension is not installed (docs/scaling.md)", file=sys.stderr)
        return 1
    with database(args.citus) as (location, workdir):
        rows, fill_seconds = fill(location, args)
        reference = min(read_once(location, args.hours) for _ in range(args.rounds))
        before = temp_bytes(location)
        runs = [asyncio.run(run_job(location, workdir, args.hours)) for _ in range(args.rounds)]
        temp = (temp_bytes(location) - before) / args.rounds
        size = Sql(location).value("SELECT sum(pg_total_relation_size(inhrelid)) FROM "
                                   "pg_inherits WHERE inhparent = 'telemetry_alerts'::regclass")
        hostile = None
        if args.hostile_sources:
            Sql(location).rows(HOSTILE, {"sources": args.hostile_sources})
            before = temp_bytes(location)
            with_it = [asyncio.run(run_job(location, workdir, args.hours))
                       for _ in range(args.rounds)]
            hostile = (min(with_it, key=lambda run: run[0]),
                       (temp_bytes(location) - before) / args.rounds, with_it)
    seconds, detail = min(runs, key=lambda run: run[0])
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{'Citus, coordinator + 2 workers' if args.citus else 'one PostgreSQL'}: "
          f"{args.routers:,} routers, {args.hours} h window, {rows:,} alert summary rows "
          f"({size / 2**20:,.0f} MiB with indexes; written in {fill_seconds:.0f} s)")
    print(f"fleet job: {seconds:.2f} s (best of {args.rounds}: "
          f"{', '.join(f'{run[0]:.2f}' for run in runs)}), "
          f"{seconds / PERIOD_SECONDS:.1%} of its 5-minute period; found {detail}")
    print(f"reference, the window's rows read once (COPY to the client): {reference:.2f} s; "
          f"job / reference: {seconds / reference:.2f}x")
    print(f"memory: this process's peak RSS {peak_mib:.0f} MiB; PostgreSQL temporary files "
          f"{temp / 2**20:.0f} MiB per run")
    if hostile is not None:
        (hostile_seconds, hostile_detail), hostile_temp, with_it = hostile
        print(f"with one router reporting {args.hostile_sources:,} distinct sources: "
              f"{hostile_seconds:.2f} s (best of {args.rounds}: "
              f"{', '.join(f'{run[0]:.2f}' for run in with_it)}), "
              f"{hostile_seconds / seconds:.2f}x the job without it; temporary files "
              f"{hostile_temp / 2**20:.0f} MiB per run; this process's peak RSS "
              f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB; found "
              f"{hostile_detail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

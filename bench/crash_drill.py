"""Crash drill: kill the server with SIGKILL at random moments under fleet load, restart it,
and check the fleet's ledger against the database.

    python -m bench.crash_drill [--kills 10] [--routers 50] [--seed 1] [--up 0.3 2.0]

Passes when every acknowledged record is stored exactly once, every value it carries is in
the hunt index for its router (written by the server's hunt indexer from the stored chunks,
waited for up to 60 s after the fleet stops, with the server still running), no request
is half stored, no refused request stored anything, the server never answered 500, and it
served again after every restart. tests/test_drills.py runs a quick version.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.fleet import TABLES, Fleet, Ledger, LedgerCheck, check_ledger, summary
from server.db.location import DatabaseLocation
from server.db.connect import connect
from server.generation.service import CLAIM_LEASE
from server.telemetry.indicators import carried
from testkit.corpus import publish_corpus_ruleset
from testkit.database import Sql, throwaway_database
from testkit.telemetry import load_record_tables
from testkit.server import ServerRunner


@dataclass
class DrillResult:
    ledger: Ledger
    check: LedgerCheck
    kills: int
    seconds: float
    answered_after_last_restart: int
    # acknowledged records checked against the hunt index, and those with a carried value
    # the index lacks for their router
    hunt_checked: int
    unhunted: int
    # seconds after the last restart until every router had payloads (None: not awaited)
    all_generated_after: float | None = None

    @property
    def ok(self) -> bool:
        return (self.check.ok and not self.unhunted and not self.ledger.server_errors()
                and self.answered_after_last_restart > 0
                and self.all_generated_after != float("inf"))


def server_settings(location: DatabaseLocation, workdir: Path) -> dict[str, str]:
    """Generation from the corpus ruleset when the corpus is there, else API only."""
    try:
        return publish_corpus_ruleset(location, workdir)
    except (RuntimeError, FileNotFoundError):
        return {"RULE_GENERATION_ENABLED": "false"}


def hunt_check(location: DatabaseLocation, ledger: Ledger) -> tuple[int, int]:
    """Acknowledged records checked, and those carrying a value that no posting of their
    router holds (the drill never packs, so every posting is a row of hunt_postings)."""
    acknowledged = {(mac, flow_id) for mac, kinds in ledger.acknowledged.items()
                    for flow_ids in kinds.values() for flow_id in flow_ids}
    conn = connect(location)
    try:
        with conn.cursor() as cur:
            load_record_tables(cur, location)
            cur.execute("SELECT mac::text, kind::text, value FROM hunt_postings "
                        "WHERE mac = ANY(%s::macaddr[])", (ledger.macs,))
            posted = set(cur.fetchall())
            checked = missing = 0
            for table in TABLES.values():
                cur.execute(f"SELECT mac::text, record FROM {table} "
                            f"WHERE mac = ANY(%s::macaddr[])", (ledger.macs,))
                for mac, record in cur:
                    if (mac, record.get("flow_id")) in acknowledged:
                        checked += 1
                        missing += any((mac, code, value) not in posted
                                       for code, value in carried(record))
    finally:
        conn.close()
    return checked, missing


INDEX_TIMEOUT = 60.0  # a record can be hunted this long after its acknowledgement


async def await_indexed(location: DatabaseLocation, timeout: float) -> float:
    """Seconds until the server's hunt indexer has read every pending upload."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        pending = await asyncio.to_thread(
            Sql(location).value, "SELECT count(*) FROM hunt_pending")
        if pending == 0:
            return time.monotonic() - started
        await asyncio.sleep(0.5)
    return timeout


def routers_with_payloads(location: DatabaseLocation, macs: list[str]) -> int:
    return Sql(location).value("SELECT count(*) FROM router_rules WHERE mac = "
                                 "ANY(%s::macaddr[]) AND ids_payload_gz IS NOT NULL", (macs,))


async def await_payloads(location: DatabaseLocation, macs: list[str], timeout: float) -> float:
    """Seconds until every router has payloads; infinity when the timeout passes first."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if await asyncio.to_thread(routers_with_payloads, location, macs) == len(macs):
            return time.monotonic() - started
        await asyncio.sleep(1)
    return float("inf")


async def crash_drill(location: DatabaseLocation, workdir: Path, kills: int = 10,
                      routers: int = 50, seed: int = 1, up_seconds: tuple[float, float] =
                      (0.3, 2.0), generation_timeout: float | None = None) -> DrillResult:
    """With `generation_timeout`, also wait after the last restart until every router has its
    payloads: claims held by the killed processes must run out and be taken over."""
    rng = random.Random(seed)
    settings = server_settings(location, workdir)
    generating = settings.get("RULE_GENERATION_ENABLED") != "false"
    server = ServerRunner(location, workdir, **settings).start()
    fleet = Fleet([server.url], routers, pause_seconds=0.3, request_timeout=10)
    started = time.monotonic()
    running = asyncio.create_task(fleet.run(seconds=3600))
    try:
        for _ in range(kills):
            await asyncio.sleep(rng.uniform(*up_seconds))
            await asyncio.to_thread(server.kill)
            await asyncio.to_thread(server.start)
        answered_before = sum(fleet.ledger.statuses.values())
        await asyncio.sleep(max(up_seconds))
        answered_after = sum(fleet.ledger.statuses.values()) - answered_before
        all_generated = None
        if generation_timeout is not None and generating:
            all_generated = await await_payloads(location, fleet.ledger.macs,
                                                 generation_timeout)
    finally:
        fleet.stop()
        ledger = await running
        try:
            indexed_after = await await_indexed(location, INDEX_TIMEOUT)
        finally:
            await asyncio.to_thread(server.stop)
    print(f"hunt index: every acknowledged upload indexed {indexed_after:.1f}s after the "
          "fleet stopped" if indexed_after < INDEX_TIMEOUT else
          f"hunt index: uploads still pending {INDEX_TIMEOUT}s after the fleet stopped")
    return DrillResult(ledger, check_ledger(location, ledger), kills,
                       time.monotonic() - started, answered_after,
                       *hunt_check(location, ledger), all_generated)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--routers", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--up", type=float, nargs=2, default=(0.3, 2.0),
                        metavar=("MIN", "MAX"), help="seconds the server runs between kills")
    parser.add_argument("--generation-timeout", type=float, default=180,
                        help="seconds allowed after the last restart for every router to get "
                             "its payloads (0: do not wait)")
    args = parser.parse_args()
    with throwaway_database() as (location, workdir):
        result = asyncio.run(crash_drill(location, workdir, args.kills, args.routers,
                                         args.seed, tuple(args.up),
                                         args.generation_timeout or None))
    print(f"{result.kills} SIGKILLs and restarts in {result.seconds:.1f}s; "
          f"{result.answered_after_last_restart} answers after the last restart")
    if result.all_generated_after is not None:
        print(f"every router had its payloads {result.all_generated_after:.1f}s after the "
              f"last restart (claims of killed processes run out after "
              f"{CLAIM_LEASE.total_seconds():.0f}s)")
    print(summary(result.ledger, result.check, result.seconds))
    print(f"hunt index: {result.hunt_checked} acknowledged records checked, "
          f"{result.unhunted} with a value missing")
    print("crash drill:", "PASSED" if result.ok else "FAILED")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())

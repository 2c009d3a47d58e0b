"""Citus drill: a worker node restarted under a fleet's uploads and polls.

    python -m bench.citus_drill [--routers 60] [--down 5]

Needs the citus extension installed for the PostgreSQL that pg_config names: the drill
starts its own coordinator and two workers of it (testkit/citus_cluster.py) and runs the
service against the coordinator, distributed (`router-backend citus distribute`). While
a fleet (bench/fleet.py) uploads and polls, worker 1 is stopped (fast) for --down
seconds and started again; two probe routers, one whose shard is on that worker and one on
the other, call meanwhile. It passes when: the router on the stopped worker is answered
503 with Retry-After, never another 5xx; the router on the other worker keeps being
answered 200 (a worker away stops only its own routers); every record the fleet saw
acknowledged is stored exactly once (the fleet's ledger) and no fleet answer was a 5xx other
than 503; and the service answers the first router again within RECOVERY_LIMIT_SECONDS of
the worker's return, by itself. The ledger is read after Citus's recovery of prepared
transactions (what its maintenance daemon does every minute): an upload whose two-phase
commit the coordinator had decided when the worker stopped is held prepared there until
then; the drill prints how many acknowledged records were not yet visible before it. tests/test_drills.py runs a quick version.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from bench.fleet import Fleet, check_ledger
from bench.outage_drill import POLL, UPLOAD
from bench.outage_drill import probe as outage_probe
from server.db.connect import connect, execute_alone
from server.db.location import DatabaseLocation
from testkit.citus_cluster import CitusCluster, citus_installed
from testkit.database import migrated_database
from testkit.server import ServerRunner

RECOVERY_LIMIT_SECONDS = 5.0
STOPPED_WORKER = 1   # the cluster's node index (0 is the coordinator)

_NODE_OF = """SELECT n.nodeport FROM pg_dist_placement p JOIN pg_dist_node n USING (groupid)
WHERE p.shardid = get_shard_id_for_distribution_column('routers', %s::macaddr)"""


@dataclass
class CitusDrillResult:
    away: Counter = field(default_factory=Counter)     # (path, status, Retry-After?)
    other: Counter = field(default_factory=Counter)    # the same, for the other worker's router
    away_seconds: list[float] = field(default_factory=list)  # each answer's time, away router
    recovery_seconds: float = float("inf")
    fleet_server_errors: dict = field(default_factory=dict)
    fleet_503: int = 0
    records_acknowledged: int = 0
    ledger_ok: bool = False
    missing_before_recovery: int = 0  # acknowledged, in a transaction still prepared
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        away_ok = all(status in (200, 503) and (status == 200 or retry)
                      for (_, status, retry) in self.away)
        saw_503 = any(status == 503 for (_, status, _) in self.away)
        other_ok = set(status for (_, status, _) in self.other) == {200}
        return (away_ok and saw_503 and other_ok
                and self.recovery_seconds <= RECOVERY_LIMIT_SECONDS
                and not self.fleet_server_errors and self.ledger_ok)


def recover_prepared(location: DatabaseLocation) -> int:
    """What Citus's maintenance daemon does every citus.recover_2pc_interval (a minute):
    commit on the workers the transactions the coordinator committed but a worker held
    prepared when it stopped. The number recovered."""
    return execute_alone(location, "SELECT recover_prepared_transactions()")[0][0]


def probe_macs(location: DatabaseLocation, away_port: int) -> tuple[str, str]:
    """A MAC whose shard is on the worker at `away_port`, and one whose shard is not."""
    found: dict[bool, str] = {}
    conn = connect(location)
    try:
        with conn.cursor() as cur:
            for number in range(1, 256):
                mac = f"02:00:00:00:34:{number:02x}"
                cur.execute(_NODE_OF, (mac,))
                found.setdefault(cur.fetchone()[0] == away_port, mac)
                if len(found) == 2:
                    return found[True], found[False]
    finally:
        conn.close()
    raise RuntimeError("no probe MAC found for each worker")


async def probe(session: aiohttp.ClientSession, url: str, mac: str
                ) -> list[tuple[str, int, bool]]:
    """An upload and a rules poll of one router: (path, status, has Retry-After)."""
    return await outage_probe(session, url, mac, (UPLOAD, POLL))


async def worker_restart(cluster: CitusCluster, server: ServerRunner, location: DatabaseLocation,
                         result: CitusDrillResult, routers: int, down_seconds: float) -> None:
    away_mac, other_mac = probe_macs(location, cluster.ports[STOPPED_WORKER])
    fleet = Fleet([server.url], routers, pause_seconds=0.3, request_timeout=15)
    running = asyncio.create_task(fleet.run(seconds=3600))
    timeout = aiohttp.ClientTimeout(total=15)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        # Registered before: a registration counts its address's registrations of the last
        # minute over every shard, so no router registers while a worker is away.
        for mac in (away_mac, other_mac):
            await probe(session, server.url, mac)
        await asyncio.sleep(2)
        await asyncio.to_thread(cluster.stop_node, STOPPED_WORKER)
        deadline = time.monotonic() + down_seconds
        while time.monotonic() < deadline:
            started = time.monotonic()
            for answer in await probe(session, server.url, away_mac):
                result.away[answer] += 1
            result.away_seconds.append((time.monotonic() - started) / 2)
            for answer in await probe(session, server.url, other_mac):
                result.other[answer] += 1
            await asyncio.sleep(0.1)
        await asyncio.to_thread(cluster.start_node, STOPPED_WORKER)
        back = time.monotonic()
        while time.monotonic() - back < 30:
            if all(status == 200 for _, status, _ in await probe(session, server.url,
                                                                  away_mac)):
                result.recovery_seconds = time.monotonic() - back
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(2)
    fleet.stop()
    ledger = await running
    result.fleet_server_errors = ledger.server_errors()
    result.fleet_503 = sum(n for (_, status), n in ledger.statuses.items() if status == 503)
    result.records_acknowledged = ledger.records_acknowledged
    before = await asyncio.to_thread(check_ledger, location, ledger)
    result.missing_before_recovery = before.acknowledged_missing
    recovered = await asyncio.to_thread(recover_prepared, location)
    check = await asyncio.to_thread(check_ledger, location, ledger)
    result.ledger_ok = check.ok
    result.notes.append(f"before Citus's recovery of prepared transactions "
                        f"({recovered} recovered): {before.acknowledged_missing} "
                        f"acknowledged records not yet visible")
    result.notes.append(f"fleet: {ledger.records_acknowledged} records acknowledged, "
                        f"{result.fleet_503} answers 503, {check.stored_rows} rows stored, "
                        f"ledger {'OK' if check.ok else check}")


async def citus_drill(directory: Path, routers: int = 60, down_seconds: float = 5
                      ) -> CitusDrillResult:
    result = CitusDrillResult()
    cluster_dir = Path(tempfile.mkdtemp(prefix="citus-"))  # one the postgres user can reach
    cluster = CitusCluster(cluster_dir)
    try:
        await asyncio.to_thread(cluster.start)
        with migrated_database(cluster.coordinator, "drill") as location:
            # The fleet shares one address: its uploads in progress are not limited by it.
            server = ServerRunner(location, directory, RULE_GENERATION_ENABLED="false",
                                  DB_TIMEOUT_SECONDS="3", INGEST_MAX_UPLOADS_PER_ADDRESS="1000")
            await asyncio.to_thread(server.start)
            try:
                await worker_restart(cluster, server, location, result, routers,
                                     down_seconds)
            finally:
                await asyncio.to_thread(server.stop)
                if result.fleet_server_errors:
                    result.notes.append(f"server log: {server.log_tail()}")
    finally:
        await asyncio.to_thread(cluster.stop)
        shutil.rmtree(cluster_dir, ignore_errors=True)
    return result


def _answers(counter: Counter) -> str:
    return ", ".join(f"{path} {status}{' +Retry-After' if retry else ''}: {n}"
                     for (path, status, retry), n in sorted(counter.items()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--routers", type=int, default=60)
    parser.add_argument("--down", type=float, default=5, help="seconds the worker is away")
    args = parser.parse_args()
    if not citus_installed():
        print("citus_drill: the citus extension is not installed for the PostgreSQL "
              "pg_config names (docs/scaling.md)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as directory:
        result = asyncio.run(citus_drill(Path(directory), args.routers, args.down))
    print(f"worker away {args.down}s; its router meanwhile: {_answers(result.away)}")
    print(f"the other worker's router meanwhile: {_answers(result.other)}")
    print(f"answers to the first router took {min(result.away_seconds):.2f}-"
          f"{max(result.away_seconds):.2f}s each")
    print(f"served again {result.recovery_seconds:.2f}s after the worker returned "
          f"(limit {RECOVERY_LIMIT_SECONDS:g}s)")
    for note in result.notes:
        print(note)
    print(f"fleet server errors other than 503: {result.fleet_server_errors or 'none'}")
    print("PASS" if result.ok else "FAIL")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())

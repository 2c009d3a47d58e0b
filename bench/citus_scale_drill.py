"""Citus scale-out drill (issue 45): a worker added and the shards rebalanced in Citus's
default (online) transfer mode while a fleet uploads and polls.

    python -m bench.citus_scale_drill [--routers 40] [--shards 32] [--before 15]

A coordinator with two workers and a spare node (testkit/citus_cluster.py), set up with the
operator's commands: `router-backend citus add-node` for the two workers, `migrate`,
`citus distribute --shard-count N`. The real server; a fleet (bench/fleet.py) uploading
real EVE records and polling. After --before seconds, `router-backend citus add-node` for
the spare node and `router-backend citus rebalance`, the fleet going on; then the fleet
stops, and every acknowledged record must be stored exactly once; the new worker is
restarted and the check is made again.

Checks: the rebalance finished and moved shards to the new worker; the upload p99 of the
routers whose shards did not move, during the move, within 2× of theirs before it; no
request failed (503 included); the ledger held after the move and after the restart. Prints
the moved routers' p99 during the move, the move's time and the data moved per second.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.fleet import Fleet, check_ledger
from server.db.connect import execute_alone
from server.db.location import DatabaseLocation
from server.db.migrate import ensure_database
from testkit.citus_cluster import CitusCluster, citus_installed
from testkit.database import Sql, database_env
from testkit.server import router_backend_output, running_server

SHARDS_OF = """SELECT r.mac::text, s.nodeport FROM unnest(%s::macaddr[]) AS r(mac)
JOIN citus_shards s ON s.shardid = get_shard_id_for_distribution_column('routers', r.mac)
 AND s.table_name = 'routers'::regclass"""


@dataclass
class ScaleResult:
    seconds_to_move: float = 0.0
    bytes_moved: int = 0
    rebalance_output: str = ""
    moved_routers: int = 0
    p99_ms: dict[str, float] = field(default_factory=dict)
    statuses: dict = field(default_factory=dict)
    failed_requests: int = 0
    ledger_after_move: bool = False
    ledger_after_restart: bool = False
    shards_on_new_worker: int = 0

    @property
    def ok(self) -> bool:
        unmoved_before, unmoved_during = self.p99_ms["unmoved before"], self.p99_ms[
            "unmoved during"]
        return (self.shards_on_new_worker > 0 and self.moved_routers > 0
                and unmoved_during <= 2 * max(unmoved_before, 1.0)
                and not self.failed_requests and self.ledger_after_move
                and self.ledger_after_restart and "finished" in self.rebalance_output)


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000 if ordered else 0.0


def set_up(cluster: CitusCluster, location: DatabaseLocation, env: dict[str, str],
           shards: int) -> None:
    """As docs/scaling.md has an operator do it."""
    ensure_database(location)
    execute_alone(location, "CREATE EXTENSION IF NOT EXISTS citus")
    execute_alone(location, "SELECT citus_set_coordinator_host(%s, %s)",
                  (location.host, location.port))
    for index in range(1, cluster.workers + 1):
        router_backend_output(env, "citus", "add-node", f"127.0.0.1:{cluster.ports[index]}")
    router_backend_output(env, "migrate")
    router_backend_output(env, "citus", "distribute", "--shard-count", str(shards))


async def scale_out(cluster: CitusCluster, location: DatabaseLocation, env: dict[str, str],
                    url: str, args: argparse.Namespace) -> tuple[ScaleResult, Fleet]:
    result = ScaleResult()
    fleet = Fleet([url], args.routers, batch_records=20, pause_seconds=0.3)
    running = asyncio.ensure_future(fleet.run(args.before + 3600))
    await asyncio.sleep(args.before)
    sql = Sql(location)
    placed = dict(sql.rows(SHARDS_OF, (fleet.ledger.macs,)))
    spare = cluster.spare_nodes[0]
    size = sql.value("SELECT sum(shard_size) FROM citus_shards")
    started = time.monotonic()
    await asyncio.to_thread(router_backend_output, env, "citus", "add-node",
                            f"{spare.host}:{spare.port}")
    result.rebalance_output = await asyncio.to_thread(router_backend_output, env, "citus",
                                                      "rebalance")
    finished = time.monotonic()
    result.seconds_to_move = finished - started
    await asyncio.sleep(3)
    fleet.stop()
    await running
    now_placed = dict(sql.rows(SHARDS_OF, (fleet.ledger.macs,)))
    moved = {mac for mac in placed if now_placed.get(mac) != placed[mac]}
    result.moved_routers = len(moved)
    result.shards_on_new_worker = sql.value(
        "SELECT count(*) FROM citus_shards WHERE nodeport = %s", (spare.port,))
    result.bytes_moved = int(sql.value(
        "SELECT coalesce(sum(shard_size), 0) FROM citus_shards WHERE nodeport = %s",
        (spare.port,)))
    result.p99_ms["total size"] = size
    windows = {"before": (started - args.before, started), "during": (started, finished)}
    for group, macs in (("moved", moved), ("unmoved", set(placed) - moved)):
        for phase, (low, high) in windows.items():
            result.p99_ms[f"{group} {phase}"] = p99([
                seconds for mac, at, seconds, status in fleet.ledger.uploads
                if mac in macs and low <= at < high])
    result.statuses = dict(fleet.ledger.statuses)
    # (404: a router's payloads before the first ruleset; the drill publishes none)
    result.failed_requests = sum(n for (_, status), n in fleet.ledger.statuses.items()
                                 if status not in (200, 304, 404)) + fleet.ledger.connection_errors
    return result, fleet


def citus_scale_drill(workdir: Path, args: argparse.Namespace) -> ScaleResult:
    directory = Path(tempfile.mkdtemp(prefix="citus-scale-"))  # one postgres can reach
    cluster = CitusCluster(directory, workers=2, spare=1)
    try:
        cluster.start()
        location = cluster.coordinator.with_name("router_backend")
        env = {**os.environ, **database_env(location), "DATA_DIR": str(workdir),
               "DB_LOG_LEVEL": "error"}
        set_up(cluster, location, env, args.shards)
        with running_server(location, workdir / "server",
                            INGEST_MAX_UPLOADS_PER_ADDRESS="1000") as server:
            result, fleet = asyncio.run(scale_out(cluster, location, env, server.url, args))
        execute_alone(location, "SELECT recover_prepared_transactions()")
        result.ledger_after_move = check_ledger(location, fleet.ledger).ok
        new_worker = cluster.workers + 1
        cluster.stop_node(new_worker)
        cluster.start_node(new_worker)
        execute_alone(location, "SELECT recover_prepared_transactions()")
        result.ledger_after_restart = check_ledger(location, fleet.ledger).ok
        return result
    finally:
        cluster.stop()
        shutil.rmtree(directory, ignore_errors=True)


def report(result: ScaleResult) -> str:
    p = result.p99_ms
    mib = result.bytes_moved / 2**20
    return "\n".join([
        result.rebalance_output.strip(),
        f"add-node and rebalance: {result.seconds_to_move:.1f} s for {mib:.1f} MiB moved to "
        f"the new worker ({result.shards_on_new_worker} shards; "
        f"{mib / max(result.seconds_to_move, 0.001):.1f} MiB/s; the cluster "
        f"{p['total size'] / 2**20:.1f} MiB)",
        f"routers whose shards moved: {result.moved_routers}; upload p99 before/during the "
        f"move: moved {p['moved before']:.0f}/{p['moved during']:.0f} ms, others "
        f"{p['unmoved before']:.0f}/{p['unmoved during']:.0f} ms "
        f"({p['unmoved during'] / max(p['unmoved before'], 1.0):.2f}x, at most 2x)",
        f"answers: {result.statuses}; failed requests: {result.failed_requests}",
        f"ledger after the move: {'held' if result.ledger_after_move else 'BROKEN'}; "
        f"after the new worker's restart: {'held' if result.ledger_after_restart else 'BROKEN'}",
        "PASSED" if result.ok else "FAILED"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--routers", type=int, default=40)
    parser.add_argument("--shards", type=int, default=32)
    parser.add_argument("--before", type=float, default=15)
    args = parser.parse_args()
    if not citus_installed():
        print("the citus extension is not installed (docs/scaling.md)", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="citus-scale-work-") as workdir:
        os.chmod(workdir, 0o755)
        result = citus_scale_drill(Path(workdir), args)
    print(report(result))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())

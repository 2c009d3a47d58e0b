"""Citus mode (docs/scaling.md): every per-router table distributed by `mac`, all co-located
with `routers`, so that each router's rows of every table sit on one worker and each
per-router statement runs on that one shard; every other table stays a plain table of the
coordinator, which is the only node the service connects to.

`router-backend citus distribute` runs `distribute` once, after the migrations (and again
after a migration that adds a per-router table: it distributes only what is not yet); the
other subcommands of ops/citus.py add a worker, move shards to it and remove one. The
service itself only reads which tables are distributed (server/db/citus.py).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

import psycopg

from server.db.citus import DISTRIBUTED
from server.db.connect import connect, execute_alone
from server.db.location import DatabaseLocation
from server.db.migrate import MIGRATION_LOCK_KEY, ensure_database

# `routers` first: the others are co-located with it, and their foreign keys to it need it
# distributed already.
DISTRIBUTED_TABLES = ("routers", "router_rules", "router_keys", "enrollment_windows",
                      "upload_keys", "router_applied", "telemetry_chunks",
                      "telemetry_alerts", "telemetry_flows", "telemetry_flow_days",
                      "telemetry_alert_days", "activations", "activation_days",
                      "hunt_postings", "hunt_budgets", "hunt_pending", "intel_sightings",
                      "enforcement_days", "enforcement_hits")

# Foreign keys from tables that stay on the coordinator to `routers`, which Citus refuses
# (from a local table to a distributed one): their ON DELETE CASCADE is done by
# `server/removal.py`'s unsubscribe, in both modes.
LOCAL_FOREIGN_KEYS = (("firewall_allowlist", "firewall_allowlist_mac_fkey"),
                      ("rule_overrides", "rule_overrides_mac_fkey"))

# Rows of before migration 0018, moved into chunks by the compaction job: per-router tables
# that are never distributed.
LEGACY_TABLES = ("legacy_ids_events", "legacy_cfm_records")

_WORKERS = """SELECT nodename, nodeport FROM pg_dist_node
WHERE groupid <> 0 AND isactive AND noderole = 'primary' ORDER BY nodename, nodeport"""


class CitusNotReady(Exception):
    """The database cannot be distributed (or its shards moved) yet; the message says what
    to do."""


def distribute(location: DatabaseLocation, shard_count: int) -> list[str]:
    """Distribute the per-router tables not yet distributed (with their rows, moved to the
    workers), idempotently; the tables distributed by this call."""
    conn = connect(location, autocommit=True)
    try:
        with conn.cursor() as cur:
            _check_ready(cur, location)
            cur.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
            for table, constraint in LOCAL_FOREIGN_KEYS:
                cur.execute(f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {constraint}")
            cur.execute(DISTRIBUTED)
            done = {name for (name,) in cur.fetchall()}
            distributed = []
            for table in DISTRIBUTED_TABLES:
                if table not in done:
                    _distribute_table(cur, table, shard_count)
                    distributed.append(table)
            # Their rows were copied to the shards; the coordinator's own copy is dead weight,
            # removed once no plain table references them any more.
            for table in distributed:
                cur.execute("SELECT truncate_local_data_after_distributing_table(%s)",
                            (table,))
            return distributed
    finally:
        conn.close()  # releases the advisory lock


def _check_ready(cur, location: DatabaseLocation) -> None:
    cur.execute("SELECT extversion FROM pg_extension WHERE extname = 'citus'")
    if cur.fetchone() is None:
        raise CitusNotReady(
            f"the citus extension is not installed in database {location.name!r}: run "
            "CREATE EXTENSION citus in it on the coordinator and on every worker, then add "
            "the workers with citus_add_node (docs/scaling.md)")
    cur.execute(_WORKERS)
    if not cur.fetchall():
        raise CitusNotReady(
            f"database {location.name!r} has no worker node: add each with "
            "SELECT citus_add_node('host', port) on the coordinator (docs/scaling.md)")
    for table in LEGACY_TABLES:
        cur.execute("SELECT to_regclass(%s) IS NOT NULL", (table,))
        if cur.fetchone()[0]:
            raise CitusNotReady(
                f"{table} (rows of before migration 0018) still exists: run "
                "`router-backend telemetry compact --all` until it is gone")


def _distribute_table(cur, table: str, shard_count: int) -> None:
    if table == DISTRIBUTED_TABLES[0]:
        cur.execute("SELECT create_distributed_table(%s, 'mac', shard_count => %s)",
                    (table, shard_count))
    else:
        cur.execute("SELECT create_distributed_table(%s, 'mac', colocate_with => %s)",
                    (table, DISTRIBUTED_TABLES[0]))


def workers(cur) -> list[tuple[str, int]]:
    """The active worker nodes (host, port) of the database `cur` is connected to."""
    cur.execute(_WORKERS)
    return [(host, port) for host, port in cur.fetchall()]


def add_node(location: DatabaseLocation, host: str, port: int) -> int:
    """Make host:port a worker of the service's database: the database and the citus
    extension made on it (as the service's user) when missing, then the node added on the
    coordinator, which copies Citus's metadata and the schema's objects to it. Its node id;
    idempotent. No shard moves to it until a rebalance."""
    node = dataclasses.replace(location, host=host, port=port)
    ensure_database(node)
    execute_alone(node, "CREATE EXTENSION IF NOT EXISTS citus")
    return execute_alone(location, "SELECT citus_add_node(%s, %s)", (host, port))[0][0]


@dataclass(frozen=True)
class Rebalance:
    job_id: int            # 0: nothing to move
    state: str             # scheduled, running, finished, cancelled, failed ...
    done: int              # moves finished
    total: int             # moves in the job
    errors: tuple[str, ...] = ()

    @property
    def over(self) -> bool:
        return self.job_id == 0 or self.state in ("finished", "cancelled", "failed")


_RUNNING = re.compile(r"already running as job (\d+)")


def nodes_without_logical_wal(location: DatabaseLocation) -> list[str]:
    """The nodes (coordinator included) whose wal_level is not `logical`, which the online
    shard move needs (it replicates each shard logically while it copies)."""
    rows = execute_alone(location, "SELECT nodename, nodeport, result FROM "
                                   "run_command_on_all_nodes('SHOW wal_level') "
                                   "JOIN pg_dist_node USING (nodeid)")
    return [f"{host}:{port}" for host, port, level in rows if level != "logical"]


def start_rebalance(location: DatabaseLocation) -> int:
    """Start Citus's background rebalance in its default transfer mode (logical replication:
    the shards' tables stay writable while they move); the job's id, that of the one already
    running if there is one, 0 when nothing needs to move. CitusNotReady when a node's
    wal_level is not `logical`."""
    if not_logical := nodes_without_logical_wal(location):
        raise CitusNotReady(
            f"wal_level is not logical on {', '.join(not_logical)}: the online shard move "
            "replicates logically; set wal_level = logical in postgresql.conf on every node "
            "and restart it (docs/scaling.md)")
    try:
        return execute_alone(location, "SELECT citus_rebalance_start()")[0][0] or 0
    except psycopg.Error as error:
        running = _RUNNING.search(str(error))
        if running is None:
            raise
        return int(running.group(1))


def rebalance_status(location: DatabaseLocation, job_id: int) -> Rebalance:
    if job_id == 0:
        return Rebalance(0, "finished", 0, 0)
    rows = execute_alone(location, "SELECT state::text, details FROM citus_job_status(%s)",
                         (job_id,))
    state, details = rows[0]
    counts = details.get("task_state_counts") or {}
    # A failed move is retried by Citus with a backoff; its last error stays on the task.
    errors = tuple(task["message"] for task in details.get("tasks", ()) if task.get("message"))
    return Rebalance(job_id, state, counts.get("done", 0), sum(counts.values()), errors)


def drain_and_remove(location: DatabaseLocation, host: str, port: int) -> None:
    """Move every shard off host:port (in the default transfer mode, as a rebalance does),
    then remove the node from the cluster."""
    execute_alone(location, "SELECT citus_drain_node(%s, %s)", (host, port))
    execute_alone(location, "SELECT citus_remove_node(%s, %s)", (host, port))

"""Citus mode (docs/scaling.md): every per-router table distributed by `mac`, all co-located
with `routers`, so that each router's rows of every table sit on one worker and each
per-router statement runs on that one shard; every other table stays a plain table of the
coordinator, which is the only node the service connects to.

`router-backend citus distribute` runs `distribute` once, after the migrations (and again
after a migration that adds a per-router table: it distributes only what is not yet).
"""

from __future__ import annotations

import psycopg2

from server.db.location import DatabaseLocation
from server.db.migrate import MIGRATION_LOCK_KEY
from server.db.pool import Database

# `routers` first: the others are co-located with it, and their foreign keys to it need it
# distributed already.
DISTRIBUTED_TABLES = ("routers", "router_rules", "router_keys", "enrollment_windows",
                      "upload_keys", "router_applied", "telemetry_chunks",
                      "telemetry_alerts", "telemetry_flows", "activations", "activation_days")

# Foreign keys from tables that stay on the coordinator to `routers`, which Citus refuses
# (from a local table to a distributed one): their ON DELETE CASCADE is done by
# `server/db/routers.py`'s unsubscribe, in both modes.
LOCAL_FOREIGN_KEYS = (("firewall_allowlist", "firewall_allowlist_mac_fkey"),
                      ("rule_overrides", "rule_overrides_mac_fkey"))

# Rows of before migration 0018, moved into chunks by the compaction job: per-router tables
# that are never distributed.
LEGACY_TABLES = ("legacy_ids_events", "legacy_cfm_records")

# Tables of the database `cur` is connected to that Citus distributes (partitions left out).
DISTRIBUTED = """SELECT c.relname FROM pg_dist_partition p JOIN pg_class c ON c.oid = p.logicalrelid
WHERE NOT c.relispartition"""

_WORKERS = """SELECT nodename, nodeport FROM pg_dist_node
WHERE groupid <> 0 AND isactive AND noderole = 'primary' ORDER BY nodename, nodeport"""


class CitusNotReady(Exception):
    """The database cannot be distributed yet; the message says what to do."""


def distribute(location: DatabaseLocation, shard_count: int) -> list[str]:
    """Distribute the per-router tables not yet distributed (with their rows, moved to the
    workers), idempotently; the tables distributed by this call."""
    conn = psycopg2.connect(**location.connect_kwargs())
    try:
        conn.autocommit = True
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


async def distributed_tables(db: Database) -> set[str]:
    """The tables Citus distributes in this database; empty on plain PostgreSQL."""
    if not (await db.fetchone("SELECT to_regclass('pg_catalog.pg_dist_partition') "
                              "IS NOT NULL"))[0]:
        return set()
    return {name for (name,) in await db.fetchall(DISTRIBUTED)}

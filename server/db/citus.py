"""What the service reads of the Citus mode (docs/scaling.md): which tables Citus distributes,
for retention (server/jobs/retention.py). Distributing the tables and managing the nodes
(for the operator's commands, ops/citus.py, and the test clusters) are server/db/citus_nodes.py.
"""

from __future__ import annotations

from server.db.pool import Database

# Tables of the database `cur` is connected to that Citus distributes (partitions left out).
DISTRIBUTED = """SELECT c.relname FROM pg_dist_partition p JOIN pg_class c ON c.oid = p.logicalrelid
WHERE NOT c.relispartition"""


async def distributed_tables(db: Database) -> set[str]:
    """The tables Citus distributes in this database; empty on plain PostgreSQL."""
    if not (await db.fetchone("SELECT to_regclass('pg_catalog.pg_dist_partition') "
                              "IS NOT NULL"))[0]:
        return set()
    return {name for (name,) in await db.fetchall(DISTRIBUTED)}

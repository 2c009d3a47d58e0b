"""Operators' rule overrides (table `rule_overrides`). Adding or removing one makes the routers
it concerns due for generation now, so they get it within one queue poll."""

from __future__ import annotations

from server.db.pool import Database, execute
from server.routers.sql import make_due
from server.db.tuning_changes import record


async def add(db: Database, action: str, selector: str, mac: str | None,
              note: str | None, made_by: str) -> tuple[int, int]:
    """(the override's id, routers made due)."""
    async with db.transaction() as cur:
        return await add_in(cur, action, selector, mac, note, made_by)


async def add_in(cur, action: str, selector: str, mac: str | None, note: str | None,
                 made_by: str) -> tuple[int, int]:
    """`add` in the caller's transaction."""
    await execute(cur, "INSERT INTO rule_overrides (action, selector, mac, note) "
                       "VALUES (%s, %s, %s, %s) RETURNING id", (action, selector, mac, note))
    override_id = (await cur.fetchone())[0]
    await record(cur, made_by, "override added",
                 f"{override_id}: {action} {selector}" + (f" ({note})" if note else ""), mac)
    return override_id, await make_due(cur, mac)


async def remove(db: Database, override_id: int, made_by: str) -> int | None:
    """Routers made due, or None when there was no such override."""
    async with db.transaction() as cur:
        return await remove_in(cur, override_id, made_by)


async def remove_in(cur, override_id: int, made_by: str) -> int | None:
    """`remove` in the caller's transaction."""
    await execute(cur, "DELETE FROM rule_overrides WHERE id = %s "
                       "RETURNING mac::text, action, selector", (override_id,))
    row = await cur.fetchone()
    if row is None:
        return None
    mac, action, selector = row
    await record(cur, made_by, "override removed", f"{override_id}: {action} {selector}",
                 mac)
    return await make_due(cur, mac)


async def entries(db: Database) -> list[tuple]:
    """(id, action, selector, mac or None, note, created_at), in the order they were added."""
    return await db.fetchall("SELECT id, action, selector, mac::text, note, created_at "
                             "FROM rule_overrides ORDER BY id")


# A router removed (server/removal.py): its own overrides (the foreign key's cascade, which
# Citus mode drops: server/db/citus_nodes.py).
FORGET_ROUTER = "DELETE FROM rule_overrides WHERE mac = %(mac)s"

"""Operators' rule overrides (table `rule_overrides`). Adding or removing one makes the routers
it concerns due for generation now, so they get it within one queue poll."""

from __future__ import annotations

from server.db.pool import Database, execute
from server.db.routers import make_due


async def add(db: Database, action: str, selector: str, mac: str | None,
              note: str | None) -> tuple[int, int]:
    """(the override's id, routers made due)."""
    async with db.transaction() as cur:
        await execute(cur, "INSERT INTO rule_overrides (action, selector, mac, note) "
                           "VALUES (%s, %s, %s, %s) RETURNING id", (action, selector, mac, note))
        override_id = (await cur.fetchone())[0]
        return override_id, await make_due(cur, mac)


async def remove(db: Database, override_id: int) -> int | None:
    """Routers made due, or None when there was no such override."""
    async with db.transaction() as cur:
        await execute(cur, "DELETE FROM rule_overrides WHERE id = %s RETURNING mac::text",
                      (override_id,))
        row = await cur.fetchone()
        if row is None:
            return None
        return await make_due(cur, row[0])


async def entries(db: Database) -> list[tuple]:
    """(id, action, selector, mac or None, note, created_at), in the order they were added."""
    return await db.fetchall("SELECT id, action, selector, mac::text, note, created_at "
                             "FROM rule_overrides ORDER BY id")


"""The record of operators' changes by hand (table `tuning_changes`): written inside the
transaction of the change itself, so a change and its record stand or fall together."""

from __future__ import annotations

import psycopg

from server.db.pool import Database, execute

LISTED = 50


async def record(cur: psycopg.AsyncCursor, made_by: str, action: str, detail: str,
                 mac: str | None) -> None:
    await execute(cur, "INSERT INTO tuning_changes (made_by, action, detail, mac) "
                       "VALUES (%s, %s, %s, %s)", (made_by, action, detail, mac))


async def recent(db: Database, mac: str | None = None, limit: int = LISTED) -> list[tuple]:
    """(made_at, made_by, action, detail, mac or None), newest first: every router's and the
    fleet's, or with `mac` that router's only."""
    if mac is None:
        return await db.fetchall("SELECT made_at, made_by, action, detail, mac::text "
                                 "FROM tuning_changes ORDER BY id DESC LIMIT %s", (limit,))
    return await db.fetchall("SELECT made_at, made_by, action, detail, mac::text "
                             "FROM tuning_changes WHERE mac = %s ORDER BY id DESC LIMIT %s",
                             (mac, limit))

"""The settings the running service was started with (migration 0028), for its commands."""

from __future__ import annotations

import json

from server.db.pool import Database, execute

# Not a setting: that the service has a CONSOLE_SECRET (its value is never recorded), so that
# `console credential` does not print a new one for a service that has one.
CONSOLE_SECRET_SET = "console_secret_set"

_INSERT = """INSERT INTO service_settings (name, value, recorded_by)
SELECT key, value, %s FROM jsonb_each_text(%s::jsonb)"""


async def record(db: Database, values: dict[str, str], by: str) -> None:
    """The start's settings replace the last start's, whole, in one transaction."""
    async with db.transaction() as cur:
        await execute(cur, "DELETE FROM service_settings")
        await execute(cur, _INSERT, (by, json.dumps(values)))


async def recorded(db: Database) -> dict[str, str]:
    """What the service last recorded; empty when it never started on this database."""
    return dict(await db.fetchall("SELECT name, value FROM service_settings"))


async def service_setting(db: Database, name: str) -> str | None:
    row = await db.fetchone("SELECT value FROM service_settings WHERE name = %s", (name,))
    return row[0] if row else None

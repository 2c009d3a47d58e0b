"""Console sessions (table `console_sessions`): one row per signed-in browser, found by the
keyed hash of the id its cookie holds."""

from __future__ import annotations

from datetime import timedelta

from server.db.pool import Database, execute

LAST_SEEN_STEP = timedelta(minutes=1)  # last_seen_at written at most this often


async def start(db: Database, id_hash: bytes, name: str, credential: str, csrf: str,
                address: str, lifetime: timedelta) -> None:
    """A new session; sessions expired by now are removed on the way."""
    async with db.transaction() as cur:
        await execute(cur, "DELETE FROM console_sessions WHERE expires_at < now()")
        await execute(cur, 
            "INSERT INTO console_sessions (id_hash, name, credential, csrf, address, "
            "expires_at) VALUES (%s, %s, %s, %s, %s, now() + %s)",
            (id_hash, name, credential, csrf, address, lifetime))


async def find(db: Database, id_hash: bytes) -> tuple[str, str, str] | None:
    """(name, credential fingerprint, csrf) of a live session; its last_seen_at moved."""
    return await db.fetchone(
        "UPDATE console_sessions SET last_seen_at = CASE WHEN last_seen_at < now() - %s "
        "THEN now() ELSE last_seen_at END WHERE id_hash = %s AND expires_at > now() "
        "RETURNING name, credential, csrf", (LAST_SEEN_STEP, id_hash))


async def end(db: Database, id_hash: bytes) -> None:
    await db.execute("DELETE FROM console_sessions WHERE id_hash = %s", (id_hash,))


async def end_all_of(db: Database, name: str) -> int:
    """End every session of `name`; how many there were."""
    return await db.execute("DELETE FROM console_sessions WHERE name = %s", (name,))


async def live(db: Database) -> list[tuple]:
    """(name, started_at, last_seen_at, address, expires_at) of every live session."""
    return await db.fetchall(
        "SELECT name, started_at, last_seen_at, address, expires_at FROM console_sessions "
        "WHERE expires_at > now() ORDER BY name, started_at")

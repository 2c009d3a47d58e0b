"""Notification records: create, mark delivered or failed, mark read, page a user's feed,
claim deliveries to retry."""

from __future__ import annotations

import uuid
from datetime import timedelta

import orjson

from server.db.pool import Database, execute
from server.timestamps import iso_utc

RECORD_COLUMNS = ("id::text, user_id, type, channel, title, message, status, read, recipient, "
                  "metadata, created_at, sent_at")
RECORD_FIELDS = ("id", "userId", "type", "channel", "title", "message", "status", "read",
                 "recipient", "metadata", "createdAt", "sentAt")
FEED_FIELDS = ("id", "userId", "type", "read", "title", "status", "createdAt")


def as_record(row: tuple) -> dict:
    record = dict(zip(RECORD_FIELDS, row))
    for moment in ("createdAt", "sentAt"):
        record[moment] = iso_utc(record[moment], "milliseconds")
    return record


async def create(db: Database, user_id: str, type_: str, title: str, message: str,
                 recipient: str, metadata: dict, pending_grace: timedelta) -> dict:
    """Store a `pending` record. Its next attempt is set `pending_grace` ahead, so if this
    process dies before delivering, the retry loop delivers it then (delivery clears it)."""
    statement = (f"INSERT INTO notifications (id, user_id, type, title, message, recipient, "
                 f"metadata, next_attempt_at) VALUES (%s, %s, %s, %s, %s, %s, %s, now() + %s) "
                 f"RETURNING {RECORD_COLUMNS}")
    row = await db.fetchone(statement, (str(uuid.uuid4()), user_id, type_, title, message,
                                        recipient, orjson.dumps(metadata).decode(),
                                        pending_grace))
    return as_record(row)


async def mark_sent(db: Database, notification_id: str) -> None:
    await db.execute("UPDATE notifications SET status = 'sent', sent_at = now(), "
                     "attempts = attempts + 1, next_attempt_at = NULL, last_error = NULL "
                     "WHERE id = %s", (notification_id,))


async def mark_failed(db: Database, notification_id: str, error: str, base_delay: timedelta,
                      max_attempts: int) -> None:
    """Failed: retry after base_delay × 2^(attempts), at most an hour; give up after
    max_attempts (next_attempt_at NULL, the record stays `failed`)."""
    await db.execute(
        "UPDATE notifications SET status = 'failed', attempts = attempts + 1, last_error = %s, "
        "next_attempt_at = CASE WHEN attempts + 1 >= %s THEN NULL ELSE now() + "
        "least(interval '1 hour', %s * power(2, attempts)) END WHERE id = %s",
        (error[:500], max_attempts, base_delay, notification_id))


async def mark_undeliverable(db: Database, notification_id: str, error: str) -> None:
    """Failed for good: no further attempt."""
    await db.execute("UPDATE notifications SET status = 'failed', attempts = attempts + 1, "
                     "last_error = %s, next_attempt_at = NULL WHERE id = %s",
                     (error[:500], notification_id))


async def claim_retries(db: Database, limit: int, lease: timedelta) -> list[dict]:
    """Due failed deliveries, and pending ones left behind by a crash, taken under a lease so
    several processes never send one notification twice at once."""
    statement = (
        "UPDATE notifications SET next_attempt_at = now() + %(lease)s WHERE id IN ("
        " SELECT id FROM notifications WHERE status <> 'sent' AND next_attempt_at <= now()"
        " ORDER BY next_attempt_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED)"
        f" RETURNING {RECORD_COLUMNS}")
    async with db.cursor() as cur:
        await execute(cur, statement, {"lease": lease, "limit": limit})
        return [as_record(row) for row in await cur.fetchall()]


async def mark_read(db: Database, notification_id: str) -> dict | None:
    try:
        uuid.UUID(notification_id)
    except ValueError:
        return None
    row = await db.fetchone(f"UPDATE notifications SET read = true WHERE id = %s "
                            f"RETURNING {RECORD_COLUMNS}", (notification_id,))
    return as_record(row) if row else None


# The offset is walked in the feed index alone (an index-only scan), then only the page's rows
# are read from the table: deep pages stay cheap.
PAGE_STATEMENT = """
SELECT n.id::text, n.user_id, n.type, n.read, n.title, n.status, n.created_at
FROM (SELECT created_at, id FROM notifications WHERE user_id = %(user)s
      ORDER BY created_at DESC, id DESC LIMIT %(limit)s OFFSET %(offset)s) page
JOIN notifications n ON n.id = page.id
ORDER BY page.created_at DESC, page.id DESC"""


async def user_feed(db: Database, user_id: str, limit: int, offset: int
                    ) -> tuple[list[dict], int]:
    async with db.cursor() as cur:
        await execute(cur, "SELECT count(*) FROM notifications WHERE user_id = %s", (user_id,))
        total = (await cur.fetchone())[0]
        if total == 0 or offset >= total:
            return [], total
        await execute(cur, PAGE_STATEMENT, {"user": user_id, "limit": limit, "offset": offset})
        items = []
        for row in await cur.fetchall():
            item = dict(zip(FEED_FIELDS, row))
            item["createdAt"] = iso_utc(item["createdAt"], "milliseconds")
            items.append(item)
        return items, total

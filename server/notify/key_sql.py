"""Idempotency keys of the notification send endpoints (table `notification_keys`).

A key is claimed by the first request that brings it, in the same statement that stores its
notification, so two requests with one key can never both store. A key older than the
keeping period is as good as new: the claim overwrites it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import orjson

from server.notify.sql import RECORD_COLUMNS, NotificationRow
from server.db.pool import Database


@dataclass(frozen=True)
class KeyState:
    fingerprint: str
    status: int | None          # the answer given, once given
    response: dict | None       # jsonb, decoded by the driver
    notification_id: str | None
    claim_expired: bool         # in progress, but its owner's claim ran out


# One statement: claim the key (new, or expired) and store the notification only if the
# claim succeeded.
CLAIM_AND_CREATE = f"""
WITH claim AS (
    INSERT INTO notification_keys AS k (key, fingerprint, claimed_until, notification_id)
    VALUES (%(key)s, %(fingerprint)s, now() + %(lease)s, %(id)s)
    ON CONFLICT (key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, created_at = now(),
        claimed_until = EXCLUDED.claimed_until, notification_id = EXCLUDED.notification_id,
        status = NULL, response = NULL
    WHERE k.created_at < now() - %(keep)s
    RETURNING key)
INSERT INTO notifications (id, user_id, type, title, message, recipient, metadata,
                           next_attempt_at)
SELECT %(id)s::uuid, %(user)s, %(type)s, %(title)s, %(message)s, %(recipient)s,
       %(metadata)s::jsonb, now() + %(grace)s
FROM claim
RETURNING {RECORD_COLUMNS}"""


async def claim_and_create(db: Database, key: str, fingerprint: str, lease: timedelta,
                           keep: timedelta, notification: dict) -> NotificationRow | None:
    """The stored record when this request claimed the key; None when another holds it.
    `notification`: the parameters of notifications.new_notification."""
    row = await db.fetchone(CLAIM_AND_CREATE, {"key": key, "fingerprint": fingerprint,
                                               "lease": lease, "keep": keep, **notification})
    return NotificationRow(*row) if row else None


async def read(db: Database, key: str, keep: timedelta) -> KeyState | None:
    row = await db.fetchone(
        "SELECT fingerprint, status, response, notification_id::text, claimed_until < now() "
        "FROM notification_keys WHERE key = %s AND created_at >= now() - %s", (key, keep))
    if row is None:
        return None
    fingerprint, status, response, notification_id, expired = row
    return KeyState(fingerprint, status, response, notification_id, expired)


async def take_over(db: Database, key: str, lease: timedelta) -> bool:
    """Claim a key whose owner's claim ran out before it answered (it died)."""
    return await db.execute(
        "UPDATE notification_keys SET claimed_until = now() + %s "
        "WHERE key = %s AND status IS NULL AND claimed_until < now()", (lease, key)) == 1


async def finish(db: Database, key: str, status: int, response: dict) -> None:
    await db.execute("UPDATE notification_keys SET status = %s, response = %s WHERE key = %s",
                     (status, orjson.dumps(response).decode(), key))


async def forget_expired(db: Database, keep: timedelta, batch: int = 5000) -> int:
    return await db.execute(
        "DELETE FROM notification_keys WHERE key IN (SELECT key FROM notification_keys "
        "WHERE created_at < now() - %s LIMIT %s)", (keep, batch))


async def notification_status(db: Database, notification_id: str) -> str | None:
    row = await db.fetchone("SELECT status FROM notifications WHERE id = %s",
                            (notification_id,))
    return row[0] if row else None

"""Notification records: create, mark delivered or failed (each attempt recorded in
notification_deliveries), mark read (one or all of a user's), read one with its attempts,
page a user's feed, claim deliveries to retry. Rows come back as they are stored
(`NotificationRow`, `FeedRow`); the API's JSON of them is server/notify/records.py's."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

import orjson
import psycopg

from server.db import leases
from server.db.leases import Leased, claim_statement, fail_statement, finish_statement
from server.db.pool import Database, execute

RECORD_COLUMNS = ("id::text, user_id, type, channel, title, message, status, read, recipient, "
                  "metadata, created_at, sent_at")


@dataclass(frozen=True)
class NotificationRow:
    """One notification as stored: the columns of RECORD_COLUMNS, in their order."""
    id: str
    user_id: str
    type: str
    channel: str
    title: str
    message: str
    status: str
    read: bool
    recipient: str
    metadata: dict          # jsonb, decoded by the driver
    created_at: datetime
    sent_at: datetime | None


def new_notification(user_id: str, type_: str, title: str, message: str, recipient: str,
                     metadata: dict, pending_grace: timedelta) -> dict:
    """The parameters that store one new notification (see `create`)."""
    return {"id": str(uuid.uuid4()), "user": user_id, "type": type_, "title": title,
            "message": message, "recipient": recipient,
            "metadata": orjson.dumps(metadata).decode(), "grace": pending_grace}


CREATE = (f"INSERT INTO notifications (id, user_id, type, title, message, recipient, metadata, "
          f"next_attempt_at) VALUES (%(id)s, %(user)s, %(type)s, %(title)s, %(message)s, "
          f"%(recipient)s, %(metadata)s, now() + %(grace)s) RETURNING {RECORD_COLUMNS}")


async def create(db: Database, notification: dict) -> NotificationRow:
    """Store a `pending` record. Its next attempt is set `pending_grace` ahead, so if this
    process dies before delivering, the retry loop delivers it then (delivery clears it)."""
    return NotificationRow(*await db.fetchrow(CREATE, notification))


RETRIES = Leased("notifications", "id", "uuid", "next_attempt_at")

# Each outcome is recorded in notification_deliveries in the same statement (errors cut at
# 500 characters for both). Outcomes are recorded whoever holds the lease: a first delivery
# (right after `create`) holds none.
_RECORD_ATTEMPT = (" RETURNING id, attempts) INSERT INTO notification_deliveries "
                   "(notification_id, attempt, outcome, error) "
                   "SELECT id, attempts, %(outcome)s, %(error)s FROM done")
_SENT = "WITH done AS (" + finish_statement(
    RETRIES, "status = 'sent', sent_at = now(), attempts = attempts + 1, "
    "next_attempt_at = NULL, last_error = NULL", owned=False) + _RECORD_ATTEMPT
_FAILED = "WITH done AS (" + fail_statement(RETRIES, "status = 'failed'",
                                            owned=False) + _RECORD_ATTEMPT
_UNDELIVERABLE = "WITH done AS (" + finish_statement(
    RETRIES, "status = 'failed', attempts = attempts + 1, last_error = left(%(error)s, 500), "
    "next_attempt_at = NULL", owned=False) + _RECORD_ATTEMPT
_CLAIM = claim_statement(RETRIES, where="AND status <> 'sent'",
                         returning=RECORD_COLUMNS.replace("id::text", "w.id::text"))


async def mark_sent(db: Database, notification_id: str) -> None:
    await db.execute(_SENT, {"key": notification_id, "outcome": "sent", "error": None})


async def mark_failed(db: Database, notification_id: str, error: str, base_delay: timedelta,
                      max_attempts: int) -> None:
    """Failed: retry after base_delay × 2^(attempts), at most an hour; give up after
    max_attempts (next_attempt_at NULL, the record stays `failed`)."""
    await db.execute(_FAILED, {"key": notification_id, "outcome": "failed", "error": error[:500],
                               **leases.backoff(base_delay, timedelta(hours=1), max_attempts)})


async def mark_undeliverable(db: Database, notification_id: str, error: str) -> None:
    """Failed for good: no further attempt."""
    await db.execute(_UNDELIVERABLE, {"key": notification_id, "error": error[:500],
                                      "outcome": "undeliverable"})


async def claim_retries(db: Database, limit: int, lease: timedelta,
                        owner: str) -> list[NotificationRow]:
    """Due failed deliveries, and pending ones left behind by a crash, taken by `owner` under
    a lease so several processes never send one notification twice at once. The owner's own
    standing claims are taken again (its retry loop calls this with no delivery of its own
    under way: such a claim was left by a batch the database interrupted)."""
    rows = await leases.claim(db, _CLAIM, owner, lease, limit, own=True)
    return [NotificationRow(*row) for row in rows]


def _uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
        return True
    except ValueError:
        return False


async def mark_read(db: Database, notification_id: str) -> NotificationRow | None:
    if not _uuid(notification_id):
        return None
    row = await db.fetchone(f"UPDATE notifications SET read = true WHERE id = %s "
                            f"RETURNING {RECORD_COLUMNS}", (notification_id,))
    return NotificationRow(*row) if row else None


async def mark_all_read(db: Database, user_id: str) -> int | None:
    """Mark every unread notification of the user read: how many, or None for a user with
    no notifications at all."""
    row = await db.fetchone(
        "WITH marked AS (UPDATE notifications SET read = true WHERE user_id = %(user)s "
        "AND NOT read RETURNING 1) SELECT (SELECT count(*) FROM marked), "
        "EXISTS (SELECT 1 FROM notifications WHERE user_id = %(user)s)", {"user": user_id})
    updated, exists = row
    return updated if exists else None


@dataclass(frozen=True)
class DeliveryAttempt:
    attempt: int
    at: datetime
    outcome: str            # sent, failed, undeliverable
    error: str | None


@dataclass(frozen=True)
class WithDeliveries:
    notification: NotificationRow
    attempts: list[DeliveryAttempt]     # oldest first
    last_error: str | None
    next_attempt_at: datetime | None


async def with_deliveries(db: Database, notification_id: str) -> WithDeliveries | None:
    """The full record with its delivery attempts, last error and next attempt."""
    if not _uuid(notification_id):
        return None
    async with db.cursor() as cur:
        await execute(cur, f"SELECT {RECORD_COLUMNS}, last_error, next_attempt_at "
                           f"FROM notifications WHERE id = %s", (notification_id,))
        row = await cur.fetchone()
        if row is None:
            return None
        await execute(cur, "SELECT attempt, attempted_at, outcome, error FROM "
                           "notification_deliveries WHERE notification_id = %s "
                           "ORDER BY attempt", (notification_id,))
        attempts = [DeliveryAttempt(*attempt) for attempt in await cur.fetchall()]
    return WithDeliveries(NotificationRow(*row[:-2]), attempts, row[-2], row[-1])


# The offset is walked in the feed index alone (an index-only scan, `read` included), then
# only the page's rows are read from the table: deep pages stay cheap.
PAGE_STATEMENT = """
SELECT n.id::text, n.user_id, n.type, n.read, n.title, n.status, n.created_at
FROM (SELECT created_at, id FROM notifications WHERE user_id = %(user)s {filter}
      ORDER BY created_at DESC, id DESC LIMIT %(limit)s OFFSET %(offset)s) page
JOIN notifications n ON n.id = page.id
ORDER BY page.created_at DESC, page.id DESC"""
READ_FILTERS = {None: "", True: "AND read", False: "AND NOT read"}
PAGE_STATEMENTS = {read: PAGE_STATEMENT.format(filter=condition)
                   for read, condition in READ_FILTERS.items()}
COUNTS = ("SELECT count(*), count(*) FILTER (WHERE NOT read) FROM notifications "
          "WHERE user_id = %s")


@dataclass(frozen=True)
class FeedRow:
    """One notification of a feed's page: the columns of PAGE_STATEMENT, in their order."""
    id: str
    user_id: str
    type: str
    read: bool
    title: str
    status: str
    created_at: datetime


@dataclass(frozen=True)
class Feed:
    items: list[FeedRow]
    total: int       # the user's notifications matching the filter
    unread: int      # the user's unread notifications, whatever the filter
    exists: bool     # the user has any notification at all


async def user_feed(db: Database, user_id: str, limit: int, offset: int,
                    read: bool | None = None) -> Feed:
    """A page of the user's feed, newest first; `read` keeps only read or unread ones."""
    async with db.cursor() as cur:
        await execute(cur, COUNTS, (user_id,))
        everything, unread = await cur.fetchone()
        total = {None: everything, True: everything - unread, False: unread}[read]
        if offset >= total:
            return Feed([], total, unread, everything > 0)
        await execute(cur, PAGE_STATEMENTS[read],
                      {"user": user_id, "limit": limit, "offset": offset})
        return Feed([FeedRow(*row) for row in await cur.fetchall()], total, unread, True)


_NOTIFICATIONS = """
SELECT count(*) FILTER (WHERE status = 'failed'), count(*) FILTER (WHERE status = 'pending')
FROM notifications WHERE status <> 'sent'"""


async def status_counts(db: Database) -> dict:
    """Notifications failed for good, and waiting to be sent (`router-backend status`)."""
    failed, pending = await db.fetchrow(_NOTIFICATIONS)
    return {"failed": failed, "pending": pending}


# Many notifications stored by another capability in its own transaction (the intel's
# sightings told to owners: server/intel/owners.py), in one statement: one array a column.
STORED_COLUMNS = ("id", "user_id", "type", "channel", "title", "message", "status",
                  "recipient", "metadata", "sent_at", "next_attempt_at")
_STORE_MANY = f"""INSERT INTO notifications ({", ".join(STORED_COLUMNS)})
SELECT * FROM unnest(%s::uuid[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[],
                     %s::text[], %s::text[], %s::jsonb[], %s::timestamptz[],
                     %s::timestamptz[])"""
_EMAILED_THIS_HOUR = """SELECT DISTINCT user_id FROM notifications
WHERE user_id = ANY(%s) AND type = %s AND channel = 'email'
  AND created_at > now() - interval '1 hour'"""


async def store_many(cur: psycopg.AsyncCursor, rows: list[tuple]) -> None:
    """`rows`: tuples of the STORED_COLUMNS' values."""
    await execute(cur, _STORE_MANY, [list(column) for column in zip(*rows)])


async def emailed_this_hour(cur: psycopg.AsyncCursor, users: list[str], kind: str) -> set[str]:
    """Those of `users` emailed a notification of type `kind` within the hour."""
    await execute(cur, _EMAILED_THIS_HOUR, (users, kind))
    return {user for (user,) in await cur.fetchall()}

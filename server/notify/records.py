"""The notification API's JSON of stored notifications (docs/notification-api.md, the OpenAPI
document): the rows of server/notify/sql.py with camelCase names, times in UTC to the
millisecond (`2026-11-22T08:41:00.123Z`)."""

from __future__ import annotations

from datetime import datetime

from server.notify.sql import FeedRow, NotificationRow, WithDeliveries
from server.timestamps import iso_utc


def _moment(moment: datetime | None) -> str | None:
    return iso_utc(moment, "milliseconds")


def record_json(row: NotificationRow) -> dict:
    """A whole notification, as marking it read answers it."""
    return {"id": row.id, "userId": row.user_id, "type": row.type, "channel": row.channel,
            "title": row.title, "message": row.message, "status": row.status,
            "read": row.read, "recipient": row.recipient, "metadata": row.metadata,
            "createdAt": _moment(row.created_at), "sentAt": _moment(row.sent_at)}


def with_deliveries_json(found: WithDeliveries) -> dict:
    """A notification with its delivery attempts, last error and next attempt."""
    return {**record_json(found.notification),
            "attempts": [{"attempt": attempt.attempt, "at": _moment(attempt.at),
                          "outcome": attempt.outcome, "error": attempt.error}
                         for attempt in found.attempts],
            "lastError": found.last_error, "nextAttemptAt": _moment(found.next_attempt_at)}


def feed_item_json(row: FeedRow) -> dict:
    """One notification of a user's feed."""
    return {"id": row.id, "userId": row.user_id, "type": row.type, "read": row.read,
            "title": row.title, "status": row.status, "createdAt": _moment(row.created_at)}

"""Delivery of stored notifications, now and again later for the ones that failed.

A send endpoint stores the record first, then delivers. A failed delivery leaves the record
`failed` with a next attempt time; the retry loop (every server process serving the
notification API runs one) claims due records under a lease and delivers them, with
exponential backoff, until NOTIFICATION_MAX_ATTEMPTS. Records left `pending` by a crash
between storing and delivering are picked up the same way. The same loop forgets idempotency
keys older than NOTIFICATION_IDEMPOTENCY_HOURS.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import timedelta

from server.background import BackgroundTasks, UnrecordedOutcomes, pause, process_name
from server.notify import key_sql as notification_keys
from server.notify import sql as notification_db
from server.notify.sql import NotificationRow
from server.db.pool import Database, DatabaseUnavailable
from server.metrics import Metrics
from server.notify.mailer import DeliveryFailed, build_message
from server.settings import Settings

log = logging.getLogger("router_backend.notifications")

RETRY_BATCH = 50
RETRY_LEASE = timedelta(minutes=5)


@dataclass(frozen=True)
class Delivery:
    """The settings the notifier uses: the sender, the retries' backoff and limit, and how
    long idempotency keys are kept."""
    sender: str
    retry_seconds: int
    max_attempts: int
    keep_keys_hours: int

    @classmethod
    def from_settings(cls, settings: Settings) -> Delivery:
        return cls(settings.smtp_from, settings.notification_retry_seconds,
                   settings.notification_max_attempts, settings.notification_idempotency_hours)


class Notifier:
    def __init__(self, db: Database, mailer, delivery: Delivery, metrics: Metrics | None = None):
        self._db = db
        self._metrics = metrics or Metrics()
        self._mailer = mailer
        self._sender = delivery.sender
        self._base_delay = timedelta(seconds=delivery.retry_seconds)
        self._max_attempts = delivery.max_attempts
        self._poll = min(delivery.retry_seconds, 30)
        self._keep_keys = timedelta(hours=delivery.keep_keys_hours)
        self.owner = f"{process_name()}:{uuid.uuid4().hex[:8]}"  # of its retry loop's claims
        self._tasks = BackgroundTasks()
        self._health = self._metrics.loop_health("notification-retries", log)
        # Outcomes whose recording failed (the database away): id -> None (sent) or the
        # error. Recorded by the retry loop first, so a sent mail is never sent again.
        self._unrecorded = UnrecordedOutcomes(self._store_outcome)

    async def deliver(self, record: NotificationRow) -> str | None:
        """Send one stored notification; record the outcome. Returns the error, or None."""
        try:
            message = build_message(self._sender, record)
        except (ValueError, TypeError) as error:
            # No mail can ever carry this record (written before today's checks, or by
            # another service): failed for good, so it never comes back to a retry batch.
            reason = f"cannot be sent as email: {error}"
            log.error("notification %s %s", record.id, reason)
            self._metrics.notifications.labels("failed").inc()
            await notification_db.mark_undeliverable(self._db, record.id, reason)
            return reason
        try:
            await self._mailer.send(message)
        except DeliveryFailed as error:
            log.warning("delivery of notification %s failed: %s", record.id, error)
            self._metrics.notifications.labels("failed").inc()
            await self._record(record.id, str(error))
            return str(error)
        self._metrics.notifications.labels("sent").inc()
        await self._record(record.id, None)
        return None

    async def _record(self, notification_id: str, error: str | None) -> None:
        """Record a delivery's outcome (`error` None: sent); kept in memory for the retry
        loop when the database is away, and raised."""
        try:
            await self._store_outcome(notification_id, error)
        except DatabaseUnavailable:
            self._unrecorded.keep(notification_id, error)
            raise

    async def _store_outcome(self, notification_id: str, error: str | None) -> None:
        if error is None:
            await notification_db.mark_sent(self._db, notification_id)
        else:
            await notification_db.mark_failed(self._db, notification_id, error,
                                              self._base_delay, self._max_attempts)

    async def record_unrecorded(self) -> None:
        await self._unrecorded.record()

    async def retry_due(self) -> int:
        """Deliver due retries once; returns how many were delivered. One record that fails
        in an unforeseen way is counted as a failed attempt (with its reason) and the batch
        goes on, so it can never hold up the others. Claims of this notifier still standing
        from an earlier round (the database failed mid-batch, or a claim reached it after
        this loop gave up on it) are taken again, not left for RETRY_LEASE."""
        delivered = 0
        await self.record_unrecorded()  # first: the claim of a mail sent is never taken again
        for record in await notification_db.claim_retries(self._db, RETRY_BATCH, RETRY_LEASE,
                                                          self.owner):
            try:
                delivered += await self.deliver(record) is None
            except DatabaseUnavailable:
                raise
            except Exception as error:
                log.exception("delivery of notification %s failed unexpectedly", record.id)
                await notification_db.mark_failed(
                    self._db, record.id, f"{type(error).__name__}: {error}",
                    self._base_delay, self._max_attempts)
        return delivered

    def start(self, retries: bool = True) -> None:
        """The loop that records outcomes kept in memory (every process that sends) and,
        with `retries` (one process per host), delivers due retries."""
        self._tasks.spawn(self._loop(retries), "notification-retries")

    async def stop(self) -> None:
        await self._tasks.stop()

    async def _loop(self, retries: bool) -> None:
        while True:
            await pause(self._poll if retries else 1.0)
            try:
                if retries:
                    delivered = await self.retry_due()  # unrecorded outcomes first
                    if delivered:
                        log.info("notification retries: %d delivered", delivered)
                    await notification_keys.forget_expired(self._db, self._keep_keys)
                else:
                    await self.record_unrecorded()
                self._health.succeeded()
            except DatabaseUnavailable as error:
                self._health.failed(error)
            except Exception as error:
                if not self._health.failing:
                    log.exception("notification retries failed; trying again later")
                self._health.failed(error)

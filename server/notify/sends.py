"""One send request: store the notification, deliver it, answer; once per idempotency key.

Without an `Idempotency-Key` every request stores and sends. With one, the first request with
that key claims it in the statement that stores its notification (so two requests can never
both store), and its answer is kept with the key for NOTIFICATION_IDEMPOTENCY_HOURS: a repeat
with the same body gets that answer again and nothing is stored or sent; with another body,
422. A repeat that arrives while the first is still delivering waits for its answer. If the
first died before answering, the claim runs out and a repeat answers from the stored
notification (its delivery is the retry loop's business, as for any failed send).
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass
from datetime import timedelta

import orjson

from server.notify import key_sql as keys_db
from server.notify import sql as notification_db
from server.notify.sql import NotificationRow
from server.db.pool import Database
from server.refusal import Refusal
from server.idempotency_key import HEADER
from server.notify.service import Notifier
from server.notify.texts import NotificationType
from server.settings import Settings

WAIT_POLL_SECONDS = 0.05


class KeyReused(Refusal):
    """An Idempotency-Key sent before with another body."""


class KeyInProgress(Refusal):
    """The request holding this Idempotency-Key has not answered yet: try again soon."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict


def fingerprint(kind: NotificationType, body: dict) -> str:
    """The same endpoint and the same JSON body (keys in any order) give the same print."""
    canonical = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(kind.path.encode() + b"\n" + canonical).hexdigest()


class Sends:
    def __init__(self, db: Database, notifier: Notifier, keep: timedelta, lease: timedelta):
        self._db = db
        self._notifier = notifier
        self._keep = keep      # how long a key's answer is kept
        self._lease = lease    # how long the first request may take to answer

    @property
    def pending_grace(self) -> timedelta:
        """How long a new record stays `pending` before the retry loop may take it: the
        longest a live request may take to deliver it; older, its request died."""
        return self._lease

    @classmethod
    def from_settings(cls, db: Database, notifier: Notifier, settings: Settings) -> "Sends":
        # The first request answers within its SMTP exchange (connect, then the message).
        lease = timedelta(seconds=2 * settings.smtp_timeout_seconds + 10)
        return cls(db, notifier, timedelta(hours=settings.notification_idempotency_hours), lease)

    async def send(self, kind: NotificationType, notification: dict, key: str | None = None,
                   print_: str = "") -> Answer:
        """`notification`: notifications.new_notification's parameters."""
        if key is None:
            return await self._deliver(kind, await notification_db.create(self._db,
                                                                          notification))
        deadline = asyncio.get_running_loop().time() + self._lease.total_seconds()
        while True:
            record = await keys_db.claim_and_create(self._db, key, print_, self._lease,
                                                    self._keep, notification)
            if record is not None:
                return await self._finish(key, await self._deliver(kind, record))
            answer = await self._answer_of_holder(kind, key, print_, deadline)
            if answer is not None:
                return answer

    async def _answer_of_holder(self, kind: NotificationType, key: str, print_: str,
                                deadline: float) -> Answer | None:
        """The answer the key's holder gave (waiting while it works), or None when the key
        expired meanwhile and can be claimed again."""
        loop = asyncio.get_running_loop()
        while (state := await keys_db.read(self._db, key, self._keep)) is not None:
            if state.fingerprint != print_:
                raise KeyReused(f"this {HEADER} was used with a different request body")
            if state.status is not None:
                return Answer(state.status, state.response)
            if state.claim_expired and await keys_db.take_over(self._db, key, self._lease):
                return await self._finish(key, await self._answer_from_record(
                    kind, state.notification_id))
            if loop.time() > deadline:
                raise KeyInProgress(f"a request with this {HEADER} is still in progress",
                               retry_after_seconds=5)
            await asyncio.sleep(WAIT_POLL_SECONDS)
        return None

    async def _deliver(self, kind: NotificationType, record: NotificationRow) -> Answer:
        error = await self._notifier.deliver(record)
        if error is not None:
            return _failed(record.id)
        return Answer(200, {"message": kind.reply})

    async def _answer_from_record(self, kind: NotificationType, notification_id: str) -> Answer:
        status = await keys_db.notification_status(self._db, notification_id)
        return Answer(200, {"message": kind.reply}) if status == "sent" else _failed(
            notification_id)

    async def _finish(self, key: str, answer: Answer) -> Answer:
        await keys_db.finish(self._db, key, answer.status, answer.body)
        return answer


def _failed(notification_id: str) -> Answer:
    return Answer(500, {"error": "email delivery failed; the notification is stored and will "
                                 "be retried", "id": notification_id})

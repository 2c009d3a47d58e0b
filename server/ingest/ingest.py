"""One telemetry request, end to end: decoded pieces -> records -> checked and summarised
-> compressed chunks (server/db/telemetry.py).

The request is one transaction: it stores every record it reports as accepted, or nothing
(400/413/503 leave the tables as they were). With an Idempotency-Key the key is stored in the
same transaction, and a repeat is answered from it (server/ingest/idempotency.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timezone

from aiohttp import web

from server.db.pool import DatabaseUnavailable
from server.db import upload_keys
from server.db.telemetry import CommitInDoubt, KeyAlreadyUsed, was_committed
from server.db.upload_keys import UploadKey
from server.errors import BadRequest, UnsupportedMediaType
from server.ingest.body import BodyLimits, decoded_chunks
from server.idempotency_key import idempotency_key
from server.ingest.idempotency import body_fingerprint, replayed_answer
from server.ingest.records import ACCEPTED_TYPES, BodyError, RawRecord, splitter_for
from server.settings import Settings
from server.telemetry.extract import RecordError
from server.telemetry.writer import TelemetryWriter
from server.typedefs import FLOOD_LIMITS, INGEST_DATABASE, SETTINGS



class IngestReport:
    def __init__(self, max_errors: int):
        self.accepted = 0
        self.rejected = 0
        self.errors: list[dict] = []
        self._max_errors = max_errors

    def reject(self, number: int, message: str) -> None:
        self.rejected += 1
        if len(self.errors) < self._max_errors:
            self.errors.append({"line": number, "error": message})

    def as_json(self) -> dict:
        return {"accepted": self.accepted, "rejected": self.rejected, "errors": self.errors}


def body_limits(settings: Settings) -> BodyLimits:
    return BodyLimits(settings.ingest_max_body_bytes, settings.ingest_body_idle_seconds,
                      settings.ingest_max_gzip_ratio)


@dataclass(frozen=True)
class Ingested:
    answer: dict
    replayed: bool = False  # the first answer to this Idempotency-Key; nothing stored now


async def ingest_body(request: web.Request, mac: str, kind: str) -> Ingested:
    settings = request.app[SETTINGS]
    if request.content_type not in ACCEPTED_TYPES:
        raise UnsupportedMediaType(
            f"unsupported Content-Type {request.content_type!r} "
            "(use application/json for an array or application/x-ndjson)")
    key = idempotency_key(request)
    db = request.app[INGEST_DATABASE]
    fingerprint = body_fingerprint(request.content_type)
    if key is not None and (earlier := await upload_keys.recorded(db, mac, kind, key)):
        async for chunk in _decoded(request, settings):
            fingerprint.update(chunk)
        return Ingested(replayed_answer(earlier, fingerprint.digest(), key), replayed=True)
    try:
        return Ingested(await _store(request, mac, kind, key, fingerprint))
    except KeyAlreadyUsed:  # an upload with the key committed while this one was read
        earlier = await upload_keys.recorded(db, mac, kind, key)
        return Ingested(replayed_answer(earlier, fingerprint.digest(), key), replayed=True)


async def _decoded(request: web.Request, settings: Settings) -> AsyncIterator[bytes]:
    try:
        async for chunk in decoded_chunks(request, body_limits(settings)):
            yield chunk
    except BodyError as error:
        raise BadRequest(f"unreadable body: {error}") from None


async def _store(request: web.Request, mac: str, kind: str, key: str | None,
                 fingerprint: "hashlib._Hash") -> dict:
    """Store the body's records in one transaction (with `key`, when given); the answer."""
    settings = request.app[SETTINGS]
    splitter = splitter_for(request.content_type, settings.ingest_max_record_bytes)
    report = IngestReport(settings.ingest_max_reported_errors)
    limits = request.app[FLOOD_LIMITS]
    db = request.app[INGEST_DATABASE]
    received_at = datetime.now(timezone.utc)
    async with TelemetryWriter(db, mac, kind, received_at,
                               settings.ingest_batch_rows) as writer:

        async def take(records: list[RawRecord]) -> None:
            limits.records_arrived(mac, len(records))
            for number, raw in records:
                if raw is None:
                    report.reject(number, "record exceeds the size limit of "
                                          f"{settings.ingest_max_record_bytes} bytes")
                    continue
                try:
                    full = writer.add(raw)
                except RecordError as error:
                    report.reject(number, str(error))
                    continue
                report.accepted += 1
                if full:
                    await writer.flush()

        try:
            async for chunk in _decoded(request, settings):
                if key is not None:
                    fingerprint.update(chunk)
                await take(splitter.feed(chunk))
            await take(splitter.close())
        except BodyError as error:
            raise BadRequest(f"unreadable body: {error}") from None
        uploaded = None if key is None else UploadKey(mac, kind, key, fingerprint.digest(),
                                                      report.as_json())
        try:
            await writer.commit(uploaded)
        except CommitInDoubt as doubt:
            if not await was_committed(db, kind, mac, received_at,
                                       doubt, report.accepted):
                raise DatabaseUnavailable(f"nothing stored: {doubt}") from None
    return report.as_json()

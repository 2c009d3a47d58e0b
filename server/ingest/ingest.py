"""One telemetry request, end to end: decoded pieces -> records -> checked and summarised
-> compressed chunks (server/db/telemetry.py).

The request is one transaction: it stores every record it reports as accepted, or nothing
(400/413/503 leave the tables as they were). With an Idempotency-Key the key is stored in the
same transaction, and a repeat is answered from it (server/ingest/idempotency.py).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timezone

from engine.addresses import network_of
from server.db.pool import Database, DatabaseUnavailable
from server.telemetry import upload_key_sql as upload_keys
from server.db.telemetry import CommitInDoubt, KeyAlreadyUsed, was_committed
from server.telemetry.upload_key_sql import UploadKey
from server.ingest.errors import BodyUnreadable, FormatUnsupported, NothingStored
from server.ingest.body import Body, BodyLimits, decoded_chunks
from server.ingest.idempotency import body_fingerprint, replayed_answer
from server.ingest.records import ACCEPTED_TYPES, BodyError, RawRecord, splitter_for
from server.ingest.turns import WRITE_OVERTIME_SECONDS, FairTurns, Served
from server.settings import Settings, host_cores
from server.telemetry.extract import RecordError
from server.hunt.postings import PendingUpload
from server.telemetry.writer import TelemetryWriter
from server.web.limits import FloodLimits

log = logging.getLogger("router_backend.ingest")


class IngestReport:
    def __init__(self, max_errors: int):
        self.accepted = 0
        self.rejected = 0
        self.errors: list[dict] = []
        self.unread: dict | None = None
        self._max_errors = max_errors

    def reject(self, number: int, message: str) -> None:
        self.rejected += 1
        if len(self.errors) < self._max_errors:
            self.errors.append({"line": number, "error": message})

    def as_json(self) -> dict:
        answer = {"accepted": self.accepted, "rejected": self.rejected, "errors": self.errors}
        if self.unread:
            answer["unread"] = self.unread
        return answer


UNREAD_HINT = {
    "events": "stored as sent, but /log/events reads alerts only: send flows and protocol "
              "records (dns, tls, http, fileinfo) to /log/cfm, and others not at all",
    "cfm": "stored as sent, but /log/cfm reads flows and protocol records only: send alerts "
           "to /log/events, and others not at all"}


def unread_answer(unread: dict[str, int], kind: str) -> dict:
    """Records stored as sent that this endpoint does not read, by event_type."""
    return {"records": sum(unread.values()), "event_types": unread, "hint": UNREAD_HINT[kind]}


def nothing_stored(report: IngestReport, kind: str) -> NothingStored:
    """The 422 of an upload none of whose records could be stored, with a hint at the
    usual cause."""
    messages = " ".join(error["error"] for error in report.errors)
    if report.rejected == 0:
        hint = "the body holds no record: one JSON object per line, or a JSON array"
    elif "unexpected content after document" in messages or "trailing" in messages:
        hint = ("several records on one line: send one JSON object per line (curl -d strips "
                "newlines; use --data-binary @FILE)")
    elif "not valid UTF-8" in messages:
        hint = ("the body is not UTF-8 JSON text: compressed with something else than gzip, "
                "or binary")
    else:
        hint = "no record could be stored: see the errors"
    return NothingStored(f"nothing stored: {report.rejected} record(s) rejected, none "
                         f"accepted ({hint})", details={
                             **report.as_json(), "hint": hint, "endpoint": f"/log/{kind}"})


@dataclass(frozen=True)
class Upload:
    """One telemetry upload as its handler read it off the request."""
    content_type: str
    idempotency_key: str | None
    body: Body
    address: str = "-"  # the client's (server/web/peers.py): its network is credited


@dataclass(frozen=True)
class Ingested:
    answer: dict
    replayed: bool = False  # the first answer to this Idempotency-Key; nothing stored now


@dataclass(frozen=True)
class IngestConfig:
    """The INGEST_* settings ingestion uses: a body's limits, a record's, how many errors an
    answer lists, and the records a chunk holds."""
    body: BodyLimits
    max_record_bytes: int
    max_reported_errors: int
    batch_rows: int
    connections: int  # the ingestion pool's (INGEST_DB_POOL_MAX)
    writes_at_once: int  # INGEST_WRITES_AT_ONCE, `auto` resolved

    @classmethod
    def from_settings(cls, settings: Settings) -> IngestConfig:
        return cls(BodyLimits(settings.ingest_max_body_bytes, settings.ingest_body_idle_seconds,
                              settings.ingest_max_gzip_ratio),
                   settings.ingest_max_record_bytes, settings.ingest_max_reported_errors,
                   settings.ingest_batch_rows, settings.ingest_db_pool_max,
                   writes_at_once(settings))


class Ingestion:
    """Telemetry ingestion in one process: uploads stored through its own pool
    (INGEST_DB_POOL_MAX, so they never take the other requests' connections), records
    counted against each router's flood limit."""

    def __init__(self, db: Database, limits: FloodLimits, config: IngestConfig) -> None:
        self._db = db
        self._limits = limits
        self._config = config
        self._served = Served()
        # The spare turn (turns.py) has a connection of its own (SPARE_CONNECTIONS).
        self._connections = FairTurns(self._served, config.connections, spare=True)
        self._writes = FairTurns(self._served, config.writes_at_once, WRITE_OVERTIME_SECONDS,
                                 spare=True)

    async def ingest(self, upload: Upload, mac: str, kind: str) -> Ingested:
        if upload.content_type not in ACCEPTED_TYPES:
            raise FormatUnsupported(
                f"unsupported Content-Type {upload.content_type!r} "
                "(use application/json for an array or application/x-ndjson)")
        key = upload.idempotency_key
        fingerprint = body_fingerprint(upload.content_type)
        if key is not None and (earlier := await upload_keys.recorded(self._db, mac, kind, key)):
            async for chunk in self._decoded(upload.body):
                fingerprint.update(chunk)
            return Ingested(replayed_answer(earlier, fingerprint.digest(), key), replayed=True)
        try:
            return Ingested(await self._store(upload, mac, kind, fingerprint))
        except KeyAlreadyUsed:  # an upload with the key committed while this one was read
            earlier = await upload_keys.recorded(self._db, mac, kind, key)
            return Ingested(replayed_answer(earlier, fingerprint.digest(), key), replayed=True)

    async def _decoded(self, body: Body) -> AsyncIterator[bytes]:
        try:
            async for chunk in decoded_chunks(body, self._config.body):
                yield chunk
        except BodyError as error:
            raise BodyUnreadable(f"unreadable body: {error}") from None

    async def _store(self, upload: Upload, mac: str, kind: str,
                     fingerprint: "hashlib._Hash") -> dict:
        """Store the body's records in one transaction (with the upload's key, when given);
        the answer."""
        config, key, db = self._config, upload.idempotency_key, self._db
        splitter = splitter_for(upload.content_type, config.max_record_bytes)
        report = IngestReport(config.max_reported_errors)
        received_at = datetime.now(timezone.utc)
        async with TelemetryWriter(db, mac, kind, received_at, config.batch_rows,
                                   _network(upload.address), announce=PendingUpload(),
                                   connection_turn=lambda body_read: self._connections.turn(
                                       mac, spare_allowed=body_read),
                                   write_turn=lambda: self._writes.turn(mac)) as writer:

            async def take(records: list[RawRecord]) -> None:
                self._limits.records_arrived(mac, len(records))
                self._served.count(mac, len(records))
                for number, raw in records:
                    if raw is None:
                        report.reject(number, "record exceeds the size limit of "
                                              f"{config.max_record_bytes} bytes")
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
                async for chunk in self._decoded(upload.body):
                    if key is not None:
                        fingerprint.update(chunk)
                    await take(splitter.feed(chunk))
                await take(splitter.close())
            except BodyError as error:
                raise BodyUnreadable(f"unreadable body: {error}") from None
            if report.accepted == 0:
                raise nothing_stored(report, kind)
            if writer.unread:
                report.unread = unread_answer(writer.unread, kind)
            uploaded = None if key is None else UploadKey(mac, kind, key, fingerprint.digest(),
                                                          report.as_json())
            try:
                await writer.commit(uploaded)
            except CommitInDoubt as doubt:
                if not await was_committed(db, kind, mac, received_at,
                                           doubt, report.accepted):
                    raise DatabaseUnavailable(f"nothing stored: {doubt}") from None
        return report.as_json()


def writes_at_once(settings: Settings) -> int:
    """INGEST_WRITES_AT_ONCE, `auto` resolved: the host's cores shared among its HTTP
    workers, at least one."""
    if settings.ingest_writes_at_once is not None:
        return settings.ingest_writes_at_once
    return max(1, host_cores() // settings.http_workers)


def _network(address: str) -> str | None:
    """The reporter network of an upload's address; None when it has none (a Unix socket)."""
    try:
        return network_of(address)
    except ValueError:
        return None
